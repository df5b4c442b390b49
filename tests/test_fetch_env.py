"""Goal-conditioned Fetch wrappers: goal states, batched rollouts that really step MuJoCo."""
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
from platonic_rl.envs import fetch  # noqa: E402


def test_goal_state_layout():
    g = fetch.goal_state("push", np.array([[1.0, 2.0, 3.0]]))
    assert g.shape == (1, 25)
    np.testing.assert_array_equal(g[0, 3:6], [1, 2, 3])
    assert np.count_nonzero(g) == 3
    s = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(fetch.state_to_goal("reach", s), [0, 1, 2] + [0] * 7)
    with pytest.raises(ValueError, match="task"):
        fetch.goal_state("pick", np.zeros(3))
    with pytest.raises(ValueError, match="last dimension of 3"):
        fetch.goal_state("reach", np.zeros(2))


@pytest.mark.parametrize("task", ["reach", "push"])
def test_batched_rollout_steps_and_is_seeded(task):
    env = fetch.make_vector_env(task, 2)
    rng = np.random.default_rng(0)
    policy = lambda obs, goals: rng.uniform(-1, 1, size=(len(obs), fetch.ACTION_DIM))  # noqa: E731
    out = fetch.rollout(env, task, policy, seed=0)
    dim = fetch.TASKS[task].obs_dim
    assert out["observations"].shape == (2, 51, dim) and out["actions"].shape == (2, 50, 4)
    assert np.abs(np.diff(out["observations"][:, :, :3], axis=1)).max() > 1e-3  # the gripper moved
    # The goal sits in the goal dimensions; the same seed gives the same goals.
    again = fetch.rollout(env, task, policy, seed=0)
    np.testing.assert_array_equal(out["goals"], again["goals"])
    np.testing.assert_array_equal(out["observations"][:, 0], again["observations"][:, 0])


def test_a_scripted_reacher_succeeds():
    """Moving the gripper straight at the goal reaches it: the success signal is wired correctly."""
    env = fetch.make_vector_env("reach", 3)

    def policy(obs, goals):
        action = np.zeros((len(obs), 4))
        action[:, :3] = np.clip(10 * (goals[:, :3] - obs[:, :3]), -1, 1)
        return action

    out = fetch.rollout(env, "reach", policy, seed=1)
    assert out["success"].all()


@pytest.mark.parametrize("task", ["reach", "push"])
def test_image_rollout_renders_frames_and_goal_images_without_disturbing_the_sim(task):
    env = fetch.make_vector_env(task, 2)
    renderer = fetch.ImageRenderer(env, task)
    try:
        zeros = lambda obs, goals: np.zeros((len(obs), fetch.ACTION_DIM))  # noqa: E731
        seen = []
        out = fetch.rollout(env, task, lambda o, g: (seen.append((o.shape, g.shape)), zeros(o, g))[1], seed=3,
                            renderer=renderer)
        assert out["images"].shape == (2, 51, 64, 64, 3) and out["images"].dtype == np.uint8
        assert out["goal_images"].shape == (2, 64, 64, 3)
        assert seen[0] == ((2, 64, 64, 3), (2, 64, 64, 3))  # the policy sees frames and goal images
        # The goal entity moved: the goal image differs from the first frame; the two goals differ.
        assert np.abs(out["goal_images"].astype(int) - out["images"][:, 0]).max() > 50
        assert np.abs(out["goal_images"][0].astype(int) - out["goal_images"][1]).max() > 50
        # Rendering goal images restores the simulator: states match a state-only rollout exactly.
        plain = fetch.rollout(fetch.make_vector_env(task, 2), task, zeros, seed=3)
        np.testing.assert_array_equal(out["observations"], plain["observations"])
    finally:
        renderer.close()
    with pytest.raises(ValueError, match="size"):
        fetch.ImageRenderer(env, task, size=8)
