"""OGBench's point mazes: OGBench's dataset layout read as transitions, the cells its generator draws from, the
generated data's statistics, OGBench's evaluation, and the benchmark on a tiny run."""
import json

import numpy as np
import pytest

from platonic_rl.envs import ogbench_maze
from platonic_rl.training.offline import load_dataset

MEDIUM = np.array([
    [1, 1, 1, 1, 1, 1, 1, 1],
    [1, 0, 0, 1, 1, 0, 0, 1],
    [1, 0, 0, 1, 0, 0, 0, 1],
    [1, 1, 0, 0, 0, 1, 1, 1],
    [1, 0, 0, 1, 0, 0, 0, 1],
    [1, 0, 1, 0, 0, 1, 0, 1],
    [1, 0, 0, 0, 1, 0, 0, 1],
    [1, 1, 1, 1, 1, 1, 1, 1],
])


def test_ogbench_layout_becomes_transitions_dropping_each_episodes_last_row():
    # Two episodes of 3 and 2 rows: OGBench keeps rows 0, 1 (next 1, 2) and 3 (next 4).
    obs = np.arange(10, dtype=np.float32).reshape(5, 2)
    actions = -obs
    terminals = np.array([0, 0, 1, 0, 1], bool)
    out = ogbench_maze.transitions(dict(observations=obs, actions=actions, terminals=terminals))
    np.testing.assert_array_equal(out["observations"], obs[[0, 1, 3]])
    np.testing.assert_array_equal(out["next_observations"], obs[[1, 2, 4]])
    np.testing.assert_array_equal(out["actions"], actions[[0, 1, 3]])
    np.testing.assert_array_equal(out["segment_end"], [False, True, True])
    np.testing.assert_array_equal(out["rewards"], [-1, -1, -1])


def test_a_file_in_ogbench_layout_loads_as_transitions(tmp_path):
    obs = np.random.default_rng(0).normal(size=(6, 2)).astype(np.float32)
    arrays = dict(observations=obs, actions=np.tanh(obs[:, ::-1]), terminals=np.array([0, 0, 1, 0, 0, 1], bool),
                  qpos=obs, qvel=np.zeros_like(obs))
    np.savez(tmp_path / "d.npz", **arrays)
    data = load_dataset(tmp_path / "d.npz")
    np.testing.assert_array_equal(data["next_observations"], obs[[1, 2, 4, 5]])
    np.testing.assert_array_equal(data["segment_end"], [False, True, False, True])
    assert set(data) == {"observations", "actions", "next_observations", "rewards", "segment_end"}


@pytest.mark.parametrize("terminals, message", [([0, 0, 1, 0], "terminals\\[-1\\]"), ([1, 0, 1, 1], "one step"),
                                                ([0, 1], "common length")])
def test_bad_ogbench_layouts_are_refused(terminals, message):
    obs = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=message):
        ogbench_maze.transitions(dict(observations=obs, actions=obs, terminals=np.array(terminals, bool)))


def test_cells_the_generator_draws_from():
    cells = ogbench_maze.free_cells(MEDIUM)
    assert len(cells) == 26 and (1, 1) in cells and (1, 3) not in cells
    vertices = ogbench_maze.vertex_cells(MEDIUM)
    # (3, 3) lies in a horizontal corridor (free left and right, walls above and below); (1, 1) is a room corner.
    assert (3, 3) not in vertices and (1, 1) in vertices and set(vertices) < set(cells)
    assert len(vertices) == 21
    steps = ogbench_maze.bfs_steps(MEDIUM, (1, 1))
    assert steps[1, 1] == 0 and steps[2, 2] == 2 and steps[0, 0] == -1 and steps[6, 6] == 10
    assert ogbench_maze.stitch_goal_cells(MEDIUM, (1, 1)) == [(3, 3), (4, 2)]


def test_bad_names_and_sizes_are_refused():
    with pytest.raises(ValueError, match="dataset must be one of"):
        ogbench_maze.get_spec("pointmaze-umaze-navigate-v0")
    with pytest.raises(ValueError, match="episodes must be an int >= 1"):
        ogbench_maze.generate("pointmaze-medium-navigate-v0", episodes=0)
    with pytest.raises(ValueError, match="episodes_per_task"):
        ogbench_maze.evaluate(lambda o, g: o, "pointmaze-medium-navigate-v0", episodes_per_task=0)


@pytest.fixture(scope="module")
def navigate():
    pytest.importorskip("ogbench")
    return ogbench_maze.generate("pointmaze-medium-navigate-v0", seed=3, episodes=10, progress=False)


def test_making_the_env_leaves_no_file_in_the_temporary_directory(tmp_path, monkeypatch):
    """OGBench writes each maze's XML into the temporary directory and never deletes it; make_env leaves nothing."""
    pytest.importorskip("ogbench")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    env = ogbench_maze.make_env("pointmaze-medium-v0")
    assert env.reset(seed=0)[0].shape == (2,)  # made and loaded, its file gone
    assert list(tmp_path.iterdir()) == [] and tempfile.tempdir == str(tmp_path)


def assert_oracle_is_the_envs(env, draws: int, seed: int) -> None:
    """``oracle_subgoal`` equals the env's own ``get_oracle_subgoal`` from random points to random goals."""
    rng, cache = np.random.default_rng(seed), {}
    cells = ogbench_maze.free_cells(env.maze_map)
    for _ in range(draws):
        xy = np.array(env.ij_to_xy(cells[rng.integers(len(cells))])) + rng.uniform(-2, 2, 2)
        goal = np.array(env.ij_to_xy(cells[rng.integers(len(cells))])) + rng.uniform(-1, 1, 2)
        np.testing.assert_array_equal(ogbench_maze.oracle_subgoal(env, xy, goal, cache),
                                      env.get_oracle_subgoal(xy, goal)[0])


def test_oracle_subgoal_is_the_envs_own(navigate):
    assert_oracle_is_the_envs(ogbench_maze.make_env("pointmaze-large-v0").unwrapped, 300, seed=0)



@pytest.mark.parametrize("env_name", ["pointmaze-giant-v0", "pointmaze-teleport-v0"])
def test_the_giant_and_teleport_mazes_have_ogbenchs_oracle_and_episodes(env_name):
    """The frontier mazes: the oracle is the env's own there too (its BFS ignores the teleporters, as OGBench's), and
    their datasets have OGBench's sizes (commands.sh: giant navigate 500 episodes of 2,001 steps, the rest as the
    medium and large mazes)."""
    pytest.importorskip("ogbench")
    assert_oracle_is_the_envs(ogbench_maze.make_env(env_name).unwrapped, 200, seed=1)
    maze = env_name.split("-")[1]
    navigate, stitch = (ogbench_maze.get_spec(f"pointmaze-{maze}-{kind}-v0") for kind in ("navigate", "stitch"))
    assert (navigate.episodes, navigate.steps) == ((500, 2_001) if maze == "giant" else (1_000, 1_001))
    assert (stitch.episodes, stitch.steps) == (5_000, 201)
    if maze == "giant":
        train, val = ogbench_maze.generate("pointmaze-giant-navigate-v0", seed=0, episodes=2, progress=False)
        np.testing.assert_array_equal(np.flatnonzero(train["terminals"]), [2_000, 4_001])

def test_generated_navigate_data_has_ogbenchs_shape_noise_and_dynamics(navigate):
    train, val = navigate
    assert train["observations"].shape == (10 * 1001, 2) and val["observations"].shape == (1 * 1001, 2)
    assert train["observations"].dtype == np.float32 and train["terminals"].dtype == bool
    np.testing.assert_array_equal(np.flatnonzero(train["terminals"]), np.arange(1000, 10 * 1001, 1001))
    actions = train["actions"]
    assert np.abs(actions).max() <= 1.0
    # A unit direction d plus N(0, 0.5^2) per dimension, clipped: a dimension saturates with probability
    # P(|d_k + n| >= 1). Along an axis, d = (1, 0): 1 - P(n < 0) P(|n| < 1) = 1 - 0.5 x 0.9545 = 0.523; on a diagonal,
    # d = (0.707, 0.707): 1 - (1 - P(n >= 0.293) - P(n <= -1.707))^2 = 0.480. Every direction lies between, and 10k
    # actions put the mean within +-0.02 of that range. (Without noise only the axis-aligned actions saturate.)
    saturated = np.mean(np.any(np.abs(actions) >= 1.0, axis=1))
    assert 0.46 < saturated < 0.545, saturated
    # The point moves by 0.2 x action, except where a wall stops it.
    obs = train["observations"]
    inside = ~train["terminals"][:-1]
    residual = np.linalg.norm(obs[1:] - obs[:-1] - 0.2 * actions[:-1], axis=1)[inside]
    assert np.mean(residual < 1e-4) > 0.95
    np.testing.assert_allclose(train["qpos"], obs, atol=0)


def test_generation_is_seeded_and_leaves_numpys_global_generator_alone(navigate):
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    again, _ = ogbench_maze.generate("pointmaze-medium-stitch-v0", seed=3, episodes=2, progress=False)
    assert np.random.random() == expected
    twice, _ = ogbench_maze.generate("pointmaze-medium-stitch-v0", seed=3, episodes=2, progress=False)
    np.testing.assert_array_equal(again["observations"], twice["observations"])
    assert again["observations"].shape == (2 * 201, 2)


def test_make_dataset_caches_ogbench_files_with_their_provenance(tmp_path, navigate):
    path = ogbench_maze.make_dataset("pointmaze-medium-stitch-v0", seed=1, episodes=10, root=tmp_path,
                                     progress=False)
    assert path.name == "pointmaze-medium-stitch-v0.npz" and path.with_name(
        "pointmaze-medium-stitch-v0-val.npz").is_file()
    info = json.loads(path.with_suffix(".json").read_text())
    assert info["action_noise"] == 0.5 and info["episodes"] == 10 and info["steps_per_episode"] == 201
    assert ogbench_maze.generation_info(path, "generation_seconds", "absent") == dict(
        generation_seconds=info["generation_seconds"]) and info["generation_seconds"] > 0
    assert ogbench_maze.generation_info(tmp_path / "elsewhere.npz", "generation_seconds") == {}
    stamp = path.stat().st_mtime_ns
    assert ogbench_maze.make_dataset("pointmaze-medium-stitch-v0", seed=1, episodes=10, root=tmp_path) == path
    assert path.stat().st_mtime_ns == stamp
    data = load_dataset(path)
    assert len(data["actions"]) == 10 * 200 and data["segment_end"].sum() == 10


def test_evaluation_scores_the_oracle_high_and_standing_still_zero(navigate):
    env = ogbench_maze.make_env("pointmaze-medium-v0").unwrapped
    cache = {}

    def oracle(obs, goals):
        out = []
        for xy, goal in zip(obs.astype(np.float64), goals.astype(np.float64)):
            target = goal if env.xy_to_ij(xy) == env.xy_to_ij(goal) else ogbench_maze.oracle_subgoal(env, xy, goal,
                                                                                                     cache)
            step = target - xy
            out.append(step / (np.linalg.norm(step) + 1e-6))
        return np.array(out)

    good = ogbench_maze.evaluate(oracle, "pointmaze-medium-navigate-v0", episodes_per_task=2, seed=0,
                                 keep_trajectories=1)
    assert good["success"] == 100.0 and len(good["task_success"]) == 5
    assert good["steps"].shape == (5, 2) and good["steps"].max() < 1000
    assert good["trajectories"][0]["positions"].shape[0] == 1
    still = ogbench_maze.evaluate(lambda obs, goals: np.zeros_like(obs), "pointmaze-medium-navigate-v0",
                                  episodes_per_task=2, seed=0)
    assert still["success"] == 0.0 and (still["steps"] == 1000).all()
