"""D4RL's maze2d procedure: the MuJoCo generator's data carries D4RL's action noise; in pure JAX, shortest paths as
the MuJoCo generator's, its statistics within sampling error of the MuJoCo generator's, seeded, and bad input
refused."""
import jax
import numpy as np
import pytest

from platonic_rl.envs import maze2d
from platonic_rl.envs import maze2d_jax_data as jax_data


def test_next_cell_table_walks_the_same_shortest_paths_as_the_mujoco_generators_controller():
    layout = maze2d.get_layout("medium")
    free = [tuple(c) for c in layout.free_cells]
    table = jax_data.next_cell_table(layout)
    for a, start in enumerate(free):
        for b, target in enumerate(free):
            walked, current = [], a
            while current != b or not walked:
                current = table[current, b]
                walked.append(free[current])
                if current == b:
                    break
            assert walked == maze2d.shortest_path(layout, start, target)
    umaze = jax_data.next_cell_table("umaze")  # by hand: (1,1) -> (3,1) goes right along the top row first
    cells = [tuple(c) for c in maze2d.get_layout("umaze").free_cells]
    assert cells[umaze[cells.index((1, 1)), cells.index((3, 1))]] == (1, 2)


@pytest.fixture(scope="module")
def both():
    """20k noisy umaze transitions from each generator (the JAX one: 10 trajectories of 2000 steps)."""
    mujoco = maze2d.generate("umaze", size=20_000, seed=0, progress=False)
    return mujoco, jax_data.generate("umaze", 10, 2000, jax.random.PRNGKey(0))


def test_generated_data_carries_d4rl_action_noise(both):
    """D4RL's --noisy generation: the controller's action + N(0, 0.5^2), clipped. Measured on 1M umaze steps (seed
    0): noisy 12,493 segments and 54.8% of actions saturated in a dimension, noise-free 13,703 and 85.8% (D4RL's
    maze2d-umaze-v1: 12,459 timeouts). On 20k steps (8 seeds of 30k scaled by sqrt(1.5)): saturated fraction std
    0.0043 noisy, 0.0005 noise-free; segments per 1M std 390; the paired (same seed) noise-free minus noisy
    difference 1,270, std 170. Bounds: about 4 std."""
    noisy = both[0]  # maze2d.generate("umaze", 20_000, seed=0): the default noise is D4RL's
    clean = maze2d.generate("umaze", 20_000, seed=0, progress=False, action_noise=0.0)
    saturated = lambda d: np.mean(np.any(np.abs(d["actions"]) >= 1.0, -1))  # noqa: E731
    per_million = lambda d: d["segment_end"].sum() / 20_000 * 1e6  # noqa: E731
    assert abs(saturated(noisy) - 0.548) < 0.018 and abs(saturated(clean) - 0.858) < 0.004
    assert abs(per_million(noisy) - 12_459) < 1_600
    assert 590 < per_million(clean) - per_million(noisy) < 1_950
    assert np.all(np.abs(noisy["actions"]) <= 1.0)
    assert maze2d.dataset_id("umaze", 20_000, 0) == "platonic-rl/maze2d-umaze-20000-noise0p5-seed0-v1"
    assert maze2d.dataset_id("umaze", 20_000, 0, action_noise=0) == "platonic-rl/maze2d-umaze-20000-noise0-seed0-v1"
    for bad in (-0.1, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="action_noise must be a finite standard deviation >= 0"):
            maze2d.generate("umaze", 100, action_noise=bad, progress=False)


def test_statistics_match_the_mujoco_generator(both):
    mujoco, ours = both
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in mujoco.items()}
    # Saturated actions: 0.548 (MuJoCo) on 100k steps, 0.545 here; 20k autocorrelated steps give a std of about 0.01.
    saturated = [(np.abs(d["actions"]) >= 1.0).any(-1).mean() for d in (mujoco, ours)]
    assert abs(saturated[0] - saturated[1]) < 0.04 and 0.5 < saturated[1] < 0.6  # noise-free would be 0.86
    # Segments: about 250 of each (about 12,500 per 1M steps); a count's std is about its square root (6%). The
    # JAX data also ends a segment at each of its 10 trajectories' ends.
    segments = [mujoco["segment_end"].sum(), ours["segment_end"].sum() - 10]
    assert abs(segments[1] / segments[0] - 1) < 0.25
    # Rewards are the sparse reward of the next observation towards the recorded target.
    np.testing.assert_array_equal(ours["rewards"], np.linalg.norm(ours["next_observations"][:, :2] - ours["targets"],
                                                                  axis=-1) <= maze2d.GOAL_RADIUS)
    # Each trajectory is continuous: a transition's next observation is the following one's observation.
    following = ours["observations"].reshape(10, 2000, 4)[:, 1:]
    np.testing.assert_array_equal(ours["next_observations"].reshape(10, 2000, 4)[:, :-1], following)
    assert ours["segment_end"].reshape(10, 2000)[:, -1].all()
    # Targets are free cells' points + U(-0.1, 0.1), constant within a segment.
    cells = maze2d.cell_of(ours["targets"])
    assert (~maze2d.get_layout("umaze").walls[cells[:, 0], cells[:, 1]]).all()
    assert np.abs(ours["targets"] - cells).max() <= 0.1 + 1e-6
    inside = ~ours["segment_end"][:-1]
    np.testing.assert_array_equal(ours["targets"][1:][inside], ours["targets"][:-1][inside])


def test_generation_is_seeded_and_checks_its_arguments():
    a = jax_data.generate("umaze", 2, 300, jax.random.PRNGKey(1))
    b = jax_data.generate("umaze", 2, 300, jax.random.PRNGKey(1))
    c = jax_data.generate("umaze", 2, 300, jax.random.PRNGKey(2))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.allclose(a["observations"], c["observations"])
    clean = jax_data.generate("umaze", 2, 300, jax.random.PRNGKey(1), action_noise=0.0)
    assert (np.abs(clean["actions"]) >= 1.0).any(-1).mean() > 0.7
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="trajectories must be a positive int"):
            jax_data.generate("umaze", bad, 300, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="steps must be a positive int"):
        jax_data.generate("umaze", 2, 0, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="action_noise must be a finite standard deviation"):
        jax_data.generate("umaze", 2, 10, jax.random.PRNGKey(0), action_noise=-0.5)
    with pytest.raises(ValueError, match="layout must be one of"):
        jax_data.generate("huge", 2, 10, jax.random.PRNGKey(0))
