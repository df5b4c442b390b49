"""Goal-conditioned Fetch wrappers: goal states, batched rollouts that really step MuJoCo."""
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
from envs import fetch  # noqa: E402


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
