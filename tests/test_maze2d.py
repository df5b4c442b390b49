"""maze2d: layouts, D4RL coordinates, the waypoint controller, datasets (Minari, D4RL hdf5), the segment goal
sampler, seeds as one vmapped agent, MPPI, and the benchmark's quick run."""
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.seeds import SeedStack
from platonic_rl.common.planning import mppi_step
from platonic_rl.envs import maze2d
from platonic_rl.envs.replay import SegmentGoalSampler
from platonic_rl.training.offline import TrainConfig, train_offline


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3,000-step medium dataset, generated and written once for the module."""
    root = tmp_path_factory.mktemp("maze2d_data")
    path = maze2d.make_dataset("medium", 3_000, seed=0, root=root, progress=False)
    return root, path


def test_layouts_are_d4rls_and_pointmazes_maps():
    from gymnasium_robotics.envs.maze import maps

    for name, gym_map in (("umaze", maps.U_MAZE), ("medium", maps.MEDIUM_MAZE), ("large", maps.LARGE_MAZE)):
        layout = maze2d.get_layout(name)
        np.testing.assert_array_equal(layout.walls, np.asarray(gym_map) == 1)
        assert not layout.walls[layout.goal_cell]
        assert "G" in layout.maze.split("\\")[layout.goal_cell[0]][layout.goal_cell[1]]
    assert [maze2d.LAYOUTS[n].episode_length for n in ("umaze", "medium", "large")] == [300, 600, 800]
    with pytest.raises(ValueError, match="layout must be one of"):
        maze2d.get_layout("huge")


def test_normalized_score_reference_points():
    for layout in maze2d.LAYOUTS.values():
        np.testing.assert_allclose(maze2d.normalized_score(layout, [layout.ref_min_score, layout.ref_max_score]),
                                   [0.0, 100.0], atol=1e-9)
    # medium: (R - 13.13) / (277.39 - 13.13) * 100, by hand for R = 145.26
    assert maze2d.normalized_score("medium", 145.26) == pytest.approx(50.0, abs=1e-9)


def test_coordinates_round_trip_and_cell_centres(tmp_path_factory):
    layout = maze2d.get_layout("large")
    rng = np.random.default_rng(0)
    states = rng.normal(size=(50, 4)) * 3
    np.testing.assert_allclose(maze2d.to_d4rl(layout, maze2d.from_d4rl(layout, states)), states, atol=1e-12)
    actions = rng.uniform(-1, 1, (50, 2))
    np.testing.assert_allclose(maze2d.action_to_d4rl(maze2d.action_from_d4rl(actions)), actions)
    # D4RL's cell (i, j) is centred at (i - 0.2, j - 0.2); PointMaze's cell centre is cell_rowcol_to_xy.
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    pointmaze = gym.make(layout.gym_id).unwrapped
    # Its maze XML went to this test's temporary directory (tests/conftest.py), not the system's.
    assert any(path.suffix == ".xml" for path in Path(tempfile.gettempdir()).iterdir())
    assert Path(tempfile.gettempdir()).is_relative_to(tmp_path_factory.getbasetemp())
    for cell in layout.free_cells[:10]:
        xy = pointmaze.maze.cell_rowcol_to_xy(cell)
        np.testing.assert_allclose(maze2d.to_d4rl(layout, xy), cell - 0.2, atol=1e-12)
        np.testing.assert_array_equal(maze2d.cell_of(cell - 0.2 + rng.uniform(-0.45, 0.45, 2)), cell)


def test_a_d4rl_action_moves_along_d4rls_axes():
    env = maze2d.Maze2D("large", 2)
    start = np.array([[2.8, 1.8], [2.8, 1.8]])  # the centre of cell (3, 2), free to the right
    env.reset(seed=0, starts=start)
    for _ in range(10):  # 0.1 s at 100 N on a 4.2 kg ball: ~0.12 of travel, the start velocity ~N(0, 0.1^2) aside
        obs, _ = env.step(np.array([[1.0, 0.0], [0.0, 1.0]]))
    moved = obs[:, :2] - start
    assert moved[0, 0] > 0.08 and abs(moved[0, 1]) < 0.04  # +a pushes along D4RL's first axis
    assert moved[1, 1] > 0.08 and abs(moved[1, 0]) < 0.04
    assert np.all(np.abs(obs[:, 2:]) <= 5.0 + 1.0)


def test_shortest_path_is_a_breadth_first_path():
    layout = maze2d.get_layout("umaze")
    path = maze2d.shortest_path(layout, (3, 1), (1, 1))
    assert path == [(3, 2), (3, 3), (2, 3), (1, 3), (1, 2), (1, 1)]
    assert maze2d.shortest_path(layout, (1, 1), (1, 1)) == [(1, 1)]
    assert maze2d.cell_distances(layout, (1, 1))[3, 1] == 6
    with pytest.raises(ValueError, match="wall"):
        maze2d.cell_distances(layout, (0, 0))


@pytest.mark.parametrize("name", ["umaze", "medium", "large"])
def test_waypoint_controller_reaches_d4rls_goal(name):
    layout = maze2d.get_layout(name)
    n = 6
    env = maze2d.Maze2D(layout, n)
    obs = env.reset(seed=1, mode="single")
    controllers = [maze2d.WaypointController(layout, np.random.default_rng(i)) for i in range(n)]
    returns = np.zeros(n)
    for _ in range(layout.episode_length):
        actions = np.stack([c.action(o[:2], o[2:], layout.goal_cell)[0] for c, o in zip(controllers, obs)])
        obs, rewards = env.step(actions)
        returns += rewards
    assert np.all(returns > 0), returns  # every episode reaches the goal
    assert np.all(np.linalg.norm(obs[:, :2] - layout.goal, axis=-1) < maze2d.GOAL_RADIUS)
    assert maze2d.normalized_score(layout, returns).mean() >= 100  # D4RL's reference-controller level


def test_generated_trajectory_is_continuous_and_segmented():
    data = maze2d.generate("umaze", 4_000, seed=3, progress=False)
    np.testing.assert_array_equal(data["next_observations"][:-1], data["observations"][1:])
    ends = data["segment_end"]
    changes = np.flatnonzero(np.any(data["targets"][1:] != data["targets"][:-1], -1))
    np.testing.assert_array_equal(np.flatnonzero(ends[:-1]), changes)  # a segment per target
    lengths = np.diff(np.concatenate([[-1], np.flatnonzero(ends)]))
    assert lengths.max() <= 300 and len(lengths) > 10
    expected = np.linalg.norm(data["next_observations"][:, :2] - data["targets"], axis=-1) <= 0.5
    np.testing.assert_array_equal(data["rewards"], expected.astype(float))
    assert np.all(np.abs(data["actions"]) <= 1.0)
    again = maze2d.generate("umaze", 4_000, seed=3, progress=False)
    np.testing.assert_array_equal(again["observations"], data["observations"])  # seeded


def test_minari_reads_back_a_generated_dataset(tiny):
    import minari

    root, path = tiny
    generated = maze2d.generate("medium", 3_000, seed=0, progress=False)
    info = maze2d.dataset_info(path)
    assert info["transitions"] == 3_000 and info["episodes"] == generated["segment_end"].sum()
    assert info["action_noise"] == maze2d.ACTION_NOISE == 0.5
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        dataset = minari.load_dataset(maze2d.dataset_id("medium", 3_000, 0))
    finally:
        os.environ.pop("MINARI_DATASETS_PATH") if previous is None else os.environ.update(MINARI_DATASETS_PATH=previous)
    assert dataset.total_steps == 3_000 and dataset.total_episodes == info["episodes"]
    assert dataset.spec.env_spec.id == "PointMaze_Medium-v3"
    episode = next(dataset.iterate_episodes())
    assert set(episode.observations) == {"observation", "achieved_goal", "desired_goal"}
    loaded = maze2d.load_dataset(path, "medium")
    for key in ("observations", "next_observations", "rewards", "segment_end"):
        np.testing.assert_allclose(loaded[key], generated[key], atol=1e-12)
    np.testing.assert_allclose(loaded["actions"], generated["actions"], atol=1e-6)  # stored as float32
    mtime = (path / "generation.json").stat().st_mtime
    assert maze2d.make_dataset("medium", 3_000, seed=0, root=root) == path  # cached: not generated again
    assert (path / "generation.json").stat().st_mtime == mtime


def test_d4rl_hdf5_files_load_segmented_where_the_goal_changes(tmp_path):
    import h5py

    obs = np.arange(24, dtype=np.float32).reshape(6, 4)
    goal = np.array([[1, 1]] * 3 + [[2, 2]] * 3, np.float32)
    with h5py.File(tmp_path / "maze2d-umaze-v1.hdf5", "w") as f:
        f["observations"], f["actions"], f["infos/goal"] = obs, np.zeros((6, 2), np.float32), goal
    data = maze2d.load_dataset(tmp_path / "maze2d-umaze-v1.hdf5", "umaze")
    # rows 0-2 and 3-5 are two segments; the transition 2 -> 3 crosses them and is dropped.
    np.testing.assert_array_equal(data["observations"], obs[[0, 1, 3, 4]])
    np.testing.assert_array_equal(data["next_observations"], obs[[1, 2, 4, 5]])
    np.testing.assert_array_equal(data["segment_end"], [False, True, False, True])


def test_bad_sources_and_layouts_are_named(tiny, tmp_path):
    _, path = tiny
    with pytest.raises(ValueError, match="source .* is not a Minari dataset"):
        maze2d.load_dataset(tmp_path, "medium")
    with pytest.raises(ValueError, match="another maze than layout 'umaze'"):
        maze2d.load_dataset(path, "umaze")
    with pytest.raises(ValueError, match="layout must be one of"):
        maze2d.load_dataset(path, "giant")
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="source .*bad.hdf5.* is not an HDF5 file"):
        maze2d.load_dataset(tmp_path / "bad.hdf5", "umaze")
    import h5py

    with h5py.File(tmp_path / "other.hdf5", "w") as f:
        f["observations"] = np.zeros((3, 4))
    with pytest.raises(ValueError, match="not a D4RL maze2d file"):
        maze2d.load_dataset(tmp_path / "other.hdf5", "umaze")


def test_bad_benchmark_arguments_are_named():
    from platonic_rl.benchmarks import maze2d as bench

    with pytest.raises(ValueError, match="--qrl-bc-weight must be >= 0, got -0.1"):
        bench.Args(qrl_bc_weight=-0.1)
    with pytest.raises(ValueError, match="--qrl-updates must be >= 1, got 0"):
        bench.Args(qrl_updates=0)
    with pytest.raises(ValueError, match="--seeds must be distinct"):
        bench.Args(seeds=(1, 1))
    with pytest.raises(ValueError, match=r"--qrl-hidden must be one or more positive widths, got \(256, 0\)"):
        bench.Args(qrl_hidden=(256, 0))


def test_the_quick_scale_is_a_one_layout_one_seed_smoke_run_unless_told_otherwise():
    from platonic_rl.benchmarks import maze2d as bench

    assert (bench.Args().layouts, bench.Args().seeds) == (("umaze",), (0,))
    assert (bench.Args(scale="cpu").layouts, bench.Args(scale="cpu").seeds) == (bench.LAYOUTS, (0, 1, 2))
    assert bench.Args(layouts=("medium",), seeds=(3,)).layouts == ("medium",)
    with pytest.raises(ValueError, match="--dataset needs exactly one --layouts"):
        bench.Args(dataset="my.hdf5")  # a dataset's maze is never guessed, even where quick would pick umaze


def test_the_benchmark_overrides_reach_the_configs_they_name():
    from platonic_rl.benchmarks import maze2d as bench
    from platonic_rl.benchmarks import presets

    preset = presets.maze2d_scales()["cpu"]
    assert bench.scale_for(bench.Args(scale="cpu")) == preset
    assert preset.qrl.actor_distance_scale == "none"  # the paper's unscaled actor loss
    scale = bench.scale_for(bench.Args(scale="cpu", qrl_actor_distance_scale="batch_mean", qrl_bc_weight=0.2,
                                       qrl_hidden=(64, 32), qrl_updates=12_000, dataset_size=4_000,
                                       qrl_adaptive_entropy=True))
    assert scale.qrl == dataclasses.replace(preset.qrl, actor_distance_scale="batch_mean", bc_weight=0.2,
                                            adaptive_entropy=True,
                                            encoder_hidden=(64, 32), dynamics_hidden=(64, 32), actor_hidden=(64, 32))
    assert scale.qrl_train == dataclasses.replace(preset.qrl_train, steps=12_000)
    assert scale.dataset_size == 4_000
    assert (scale.crl, scale.gcbc, scale.crl_train) == (preset.crl, preset.gcbc, preset.crl_train)


def test_a_dataset_that_does_not_fit_the_agent_is_refused(tiny, tmp_path):
    _, path = tiny
    data = maze2d.load_dataset(path, "medium")
    agent = GCBCAgent.create(GCBCConfig(obs_dim=6, action_dim=2, hidden=(8,)), 0)
    sampler = SegmentGoalSampler.create(data, 16)
    with pytest.raises(ValueError, match=r"data does not fit the agent GCBCAgent: .*observations.*6"):
        train_offline(agent, data, TrainConfig(steps=10, batch_size=16, log_every=10, progress=False),
                      run_dir=tmp_path / "run", sampler=sampler)
    assert not (tmp_path / "run").exists()  # refused before a run directory is made


def test_segment_sampler_goals():
    ends = np.zeros(40, bool)
    ends[[9, 24, 39]] = True  # episodes [0, 9], [10, 24], [25, 39]
    obs = np.arange(40, dtype=np.float32)[:, None].repeat(4, 1)
    data = dict(observations=obs, next_observations=obs + 0.5, actions=np.zeros((40, 2)), segment_end=ends)
    sampler = SegmentGoalSampler.create(data, 20_000, p_future=1.0, discount=0.9, bc_goals=True)
    batch = jax.jit(lambda s, k: s.sample(k))(sampler, jax.random.PRNGKey(0))
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    goal_rows = np.asarray(batch["goals"][:, 0] - 0.5).astype(int)
    last = np.select([rows <= 9, rows <= 24], [9, 24], 39)
    assert np.all(goal_rows >= rows) and np.all(goal_rows <= last)  # same episode, >= 1 step ahead
    assert np.all(np.asarray(batch["bc_goals"][:, 0] - 0.5).astype(int) >= rows)
    np.testing.assert_array_equal(batch["rewards"], -1.0)
    # k = goal row - row, truncated geometric P(k) ~ 0.9^k: P(k = 1) / P(k = 0) = 0.9 (rows with >= 10 steps left)
    k = (goal_rows - rows)[last - rows >= 10]
    assert abs(np.mean(k == 1) / np.mean(k == 0) - 0.9) < 0.08
    random = SegmentGoalSampler.create(data, 20_000, p_future=0.0).sample(jax.random.PRNGKey(1))
    assert abs(float(random["goals"][:, 0].mean()) - 20.0) < 0.5  # uniform over next states 0.5..39.5
    with pytest.raises(ValueError, match="segment_end"):
        SegmentGoalSampler.create({**data, "segment_end": np.zeros(40, bool)}, 8)



def test_current_state_goals_are_reached_where_they_start():
    """OGBench's value goals: 20% the transition's own state (reward 0, mask 0: reached), 50% a future state, 30% a
    random next state (reward -1, mask 1); without p_current the batch is as before, with no masks."""
    ends = np.zeros(40, bool)
    ends[[9, 39]] = True
    obs = np.arange(40, dtype=np.float32)[:, None]
    data = dict(observations=obs, next_observations=obs + 0.5, actions=np.zeros((40, 2)), segment_end=ends)
    batch = SegmentGoalSampler.create(data, 40_000, p_future=0.5, p_current=0.2).sample(jax.random.PRNGKey(0))
    current = np.asarray(batch["goals"][:, 0] == batch["observations"][:, 0])
    assert abs(current.mean() - 0.2) < 0.01
    np.testing.assert_array_equal(batch["rewards"], np.where(current, 0.0, -1.0))
    np.testing.assert_array_equal(batch["masks"], np.where(current, 0.0, 1.0))
    before = SegmentGoalSampler.create(data, 64, p_future=0.5).sample(jax.random.PRNGKey(0))
    after = SegmentGoalSampler.create(data, 64, p_future=0.5, p_current=0.0).sample(jax.random.PRNGKey(0))
    assert "masks" not in after and all(np.array_equal(before[k], after[k]) for k in before)
    with pytest.raises(ValueError, match=r"p_current must be in \[0, 1 - p_future\] = \[0, 0.5\]"):
        SegmentGoalSampler.create(data, 8, p_future=0.5, p_current=0.6)


def test_subgoals_are_k_steps_ahead_within_the_episode_and_before_the_goal():
    """HIQL's goals: ``subgoals`` the state k = 3 steps ahead (the episode's last if nearer), ``bc_subgoals`` the state
    3 steps ahead or the bc goal if that is nearer."""
    ends = np.zeros(40, bool)
    ends[[9, 39]] = True  # episodes [0, 9] and [10, 39]
    obs = np.arange(40, dtype=np.float32)[:, None]
    data = dict(observations=obs, next_observations=obs + 1, actions=np.zeros((40, 2)), segment_end=ends)
    batch = SegmentGoalSampler.create(data, 4_000, bc_goals=True, bc_future="uniform", subgoal_steps=3).sample(
        jax.random.PRNGKey(0))
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    last_state = np.where(rows <= 9, 10, 40)  # the next state of each episode's last row
    np.testing.assert_array_equal(batch["subgoals"][:, 0], np.minimum(rows + 3, last_state))
    np.testing.assert_array_equal(batch["bc_subgoals"][:, 0], np.minimum(rows + 3, batch["bc_goals"][:, 0]))
    with pytest.raises(ValueError, match="subgoal_steps must be an int >= 1"):
        SegmentGoalSampler.create(data, 8, subgoal_steps=0)

def test_random_bc_goals_take_their_share_and_aim_their_subgoals_k_steps_ahead():
    """OGBench's actor_p_randomgoal: with bc_p_random 0.5 about half the bc goals are any dataset state (here often
    behind the row or in the other episode, which a future goal never is), and those goals' bc_subgoals are the plain
    k-steps-ahead subgoals; the other draws (rows, value goals) are those of the sampler without random bc goals."""
    ends = np.zeros(40, bool)
    ends[[9, 39]] = True  # episodes [0, 9] and [10, 39]
    obs = np.arange(40, dtype=np.float32)[:, None]
    data = dict(observations=obs, next_observations=obs + 1, actions=np.zeros((40, 2)), segment_end=ends)
    settings = dict(bc_goals=True, bc_future="uniform", subgoal_steps=3)
    key = jax.random.PRNGKey(0)
    batch = SegmentGoalSampler.create(data, 8_000, bc_p_random=0.5, **settings).sample(key)
    plain = SegmentGoalSampler.create(data, 8_000, **settings).sample(key)
    for name in ("observations", "goals", "subgoals"):
        np.testing.assert_array_equal(batch[name], plain[name])
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    bc = np.asarray(batch["bc_goals"][:, 0]).astype(int)
    changed = bc != np.asarray(plain["bc_goals"][:, 0]).astype(int)
    # a random goal equals the future one by chance about 1 time in 40: changed in about 0.5 * 39 / 40 of the rows
    assert 0.45 < changed.mean() < 0.53
    assert np.any(bc <= rows) and np.all(plain["bc_goals"][:, 0] > rows)  # random goals also lie behind
    np.testing.assert_array_equal(batch["bc_subgoals"][changed, 0], batch["subgoals"][changed, 0])
    kept = np.asarray(batch["bc_subgoals"][~changed, 0])  # future goals (or random ones equal to them by chance)
    assert np.all((kept == plain["bc_subgoals"][~changed, 0]) | (kept == batch["subgoals"][~changed, 0]))
    assert np.mean(kept == plain["bc_subgoals"][~changed, 0]) > 0.98
    with pytest.raises(ValueError, match="bc_p_random must be in \\[0, 1\\], and above 0 only with bc_goals=True"):
        SegmentGoalSampler.create(data, 8, bc_p_random=0.5)


def test_uniform_future_goals_are_any_later_state_of_the_episode_alike():
    ends = np.zeros(40, bool)
    ends[[9, 39]] = True  # episodes [0, 9] and [10, 39]
    obs = np.arange(40, dtype=np.float32)[:, None]
    data = dict(observations=obs, next_observations=obs + 1, actions=np.zeros((40, 2)), segment_end=ends)
    sampler = SegmentGoalSampler.create(data, 40_000, p_future=1.0, discount=0.9, bc_goals=True, future="uniform",
                                        bc_future="geometric")
    batch = sampler.sample(jax.random.PRNGKey(0))
    rows = np.asarray(batch["observations"][:, 0]).astype(int)
    goals = np.asarray(batch["goals"][:, 0]).astype(int)  # the goal is the next state of row + k: state row + k + 1
    # From row 10 (30 states ahead: 11..40) every goal state has probability 1/30.
    from_10 = goals[rows == 10]
    assert from_10.min() == 11 and from_10.max() == 40
    counts = np.bincount(from_10 - 11, minlength=30)
    assert counts.min() > 0.5 * counts.mean() and counts.max() < 1.5 * counts.mean()
    assert np.all(goals[rows <= 9] <= 10) and np.all(goals > rows)
    # The behaviour-cloning goals stayed geometric (discount 0.9: about 9 states ahead, against 15.5 for uniform).
    bc = np.asarray(batch["bc_goals"][:, 0]).astype(int)
    assert np.mean(bc[rows == 10] - 10) < 10 < np.mean(from_10 - 10)
    with pytest.raises(ValueError, match="future must be 'geometric' or 'uniform'"):
        SegmentGoalSampler.create(data, 8, future="exponential")


def test_seed_stack_equals_agents_made_and_updated_one_by_one():
    config = CRLConfig(obs_dim=4, action_dim=2, hidden=(16,), repr_dim=8, actor_hidden=(16,), bc_weight=0.05)
    stack = SeedStack.create(CRLAgent, config, (3, 7))
    rng = np.random.default_rng(0)
    batches = dict(observations=rng.normal(size=(2, 32, 4)), actions=rng.uniform(-1, 1, (2, 32, 2)),
                   goals=rng.normal(size=(2, 32, 4)))
    stack, metrics = jax.jit(SeedStack.update)(stack, batches)
    assert metrics["critic_loss"].shape == (2,)
    for i, seed in enumerate((3, 7)):
        alone, alone_metrics = jax.jit(CRLAgent.update)(CRLAgent.create(config, seed),
                                                      {k: v[i] for k, v in batches.items()})
        for a, b in zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(stack.agent(i))):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(alone_metrics["critic_loss"], metrics["critic_loss"][i], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        SeedStack.create(CRLAgent, config, (1, 1))


def test_mppi_step_matches_a_numpy_reference_and_lowers_the_cost():
    target = jnp.array([0.5, -0.3])

    def cost(sequences):  # [K, H, A]: squared distance of every action to the target
        return jnp.sum(jnp.square(sequences - target), axis=(1, 2))

    plan = jnp.full((5, 2), 0.1)
    key, k, std, temperature = jax.random.PRNGKey(0), 4_000, 0.7, 0.05
    action, shifted = mppi_step(key, plan, cost, num_samples=k, noise_std=std, temperature=temperature)
    # NumPy reference: S_k = cost(clip(plan + eps_k)) + temperature * sum(plan * eps_k) / std^2, w = softmin(S / temperature)
    eps = std * np.asarray(jax.random.normal(key, (k, 5, 2)), np.float64)
    u = np.clip(np.asarray(plan) + eps, -1, 1)
    scores = np.sum((u - np.asarray(target)) ** 2, axis=(1, 2)) + temperature * np.sum(np.asarray(plan) * eps, (1, 2)) / std ** 2
    w = np.exp(-(scores - scores.min()) / temperature)
    new_plan = np.clip(np.asarray(plan) + np.einsum("k,kha->ha", w / w.sum(), u - np.asarray(plan)), -1, 1)
    np.testing.assert_allclose(action, new_plan[0], atol=1e-4)
    np.testing.assert_allclose(shifted, np.concatenate([new_plan[1:], new_plan[-1:]]), atol=1e-4)
    # a near-argmin of thousands of samples: far below the starting plan's cost
    assert float(cost(jnp.asarray(new_plan)[None])[0]) < 0.3 * float(cost(plan[None])[0])
    with pytest.raises(ValueError, match="plan must be"):
        mppi_step(key, jnp.zeros(5), cost, 8)


def test_qrl_plan_costs_sum_the_learned_q_along_the_latent_rollout():
    config = QRLContinuousConfig(obs_dim=4, action_dim=2, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                                 iqe_components=4, iqe_dim_per_component=4, dynamics_hidden=(16,), actor_hidden=(16,))
    agent = QRLContinuousAgent.create(config, 0)
    rng = np.random.default_rng(0)
    obs, goal = jnp.asarray(rng.normal(size=4), jnp.float32), jnp.asarray(rng.normal(size=4), jnp.float32)
    sequences = jnp.asarray(rng.uniform(-1, 1, (3, 2, 2)), jnp.float32)
    costs = agent.plan_costs(obs, goal, sequences)
    critic = agent.critic
    expected = []
    for seq in sequences:  # by hand: z0 = f(s); c = sum_t max_i d_i(T_i(z_t, a_t), f_i(g))
        per_critic = []
        for i in range(2):
            params = jax.tree_util.tree_map(lambda x: x[i], agent.critic_params)
            z = critic.apply(params, obs[None], method="encode")
            zg = critic.apply(params, goal[None], method="encode")
            total = []
            for a in seq:
                z = critic.apply(params, z, a[None], method="dynamics")
                total.append(critic.apply(params, z, zg, method="distance")[0])
            per_critic.append(total)
        expected.append(np.max(np.array(per_critic), 0).sum())
    np.testing.assert_allclose(costs, expected, rtol=1e-5, atol=1e-4)
    d = agent.goal_distances(obs[None], goal[None])
    assert d.shape == (2, 1) and np.all(np.asarray(d) >= 0)


def test_ladder_rungs_take_each_policy_settings_type_and_old_records_stand_at_new_settings_defaults():
    from platonic_rl.benchmarks import maze2d as bench
    from platonic_rl.benchmarks import presets

    assert bench.ladder_rung("hold_steps=5") == ("hold_steps", 5)
    assert bench.ladder_rung("reach=40") == ("reach", 40.0)
    assert bench.ladder_rung("cap_to_goal_distance=true") == ("cap_to_goal_distance", True)
    assert bench.ladder_rung("cap_to_goal_distance=False") == ("cap_to_goal_distance", False)
    with pytest.raises(ValueError, match="cap_to_goal_distance takes true or false, got 'yes'"):
        bench.ladder_rung("cap_to_goal_distance=yes")
    with pytest.raises(ValueError, match="NAME one of"):
        bench.ladder_rung("horizon=5")
    scale = presets.maze2d_scales()["cpu"]
    old = dict(hold_steps=scale.policies.hold_steps)  # made before cap_to_goal_distance existed: at its default
    assert bench.record_is_current(old, "qrl_lookahead", scale)
    capped = dataclasses.replace(scale, policies=dataclasses.replace(scale.policies, cap_to_goal_distance=True))
    assert not bench.record_is_current(old, "qrl_lookahead", capped)
    assert bench.record_is_current(dict(old, cap_to_goal_distance=True), "qrl_lookahead", capped)
    # the lookahead over the actor's samples: no grid, the settings' draws; recorded, so another count evaluates again
    assert scale.policies.policy_kwargs("lookahead", candidates="actor") == dict(
        hold_steps=20, cap_to_goal_distance=False, grid_size=0, actor_samples=scale.policies.actor_samples)
    assert bench.ladder_rung("actor_samples=16") == ("actor_samples", 16)
    sampled = bench.TABLE["qrl_lookahead_actor"].settings(scale)
    fewer = dataclasses.replace(scale, policies=dataclasses.replace(scale.policies, actor_samples=16))
    assert bench.record_is_current(sampled, "qrl_lookahead_actor", scale)
    assert not bench.record_is_current(sampled, "qrl_lookahead_actor", fewer)
    assert bench.record_is_current(old, "qrl_lookahead", fewer)   # the grid's rows do not depend on it
    with pytest.raises(ValueError, match="candidates must be 'grid' or 'actor', got 'both'"):
        scale.policies.policy_kwargs("lookahead", candidates="both")


def _small_scale(bench, updates: int, small_networks: bool):
    """The quick scale with ``updates`` updates per method and, with ``small_networks``, 16-wide networks and 8
    MPPI samples (the quick scale's 64-wide networks make the run's compiles and episodes slow on 2 cores)."""
    from platonic_rl.benchmarks import presets

    quick = presets.maze2d_scales()["quick"]
    short = {f"{m}_train": dataclasses.replace(getattr(quick, f"{m}_train"), steps=updates, log_every=updates // 2,
                                               checkpoint_every=updates // 2) for m in ("qrl", "crl", "gcbc")}
    if small_networks:
        from platonic_rl.agents.crl import CRLConfig
        from platonic_rl.agents.gcbc import GCBCConfig

        short.update(qrl=presets.maze2d_qrl_config((16,), 8, (16,), 2, 4, (16,), 1e-4), mppi_samples=8,
                     policies=presets.QRLPolicySettings(hold_steps=3, num_waypoints=50, mppi_samples=16, mppi_episodes=1),
                     crl=CRLConfig(obs_dim=4, action_dim=2, hidden=(16,), repr_dim=4, actor_hidden=(16,), bc_weight=0.05),
                     gcbc=GCBCConfig(obs_dim=4, action_dim=2, hidden=(16,)))
    return dataclasses.replace(quick, **short)


@pytest.mark.slow  # ~20 s end to end; its parts (seed stacks, grid argmin, plan costs, the critic check) have fast tests
def test_benchmark_pipeline_for_qrl(tmp_path, monkeypatch):
    """The benchmark end to end for QRL and one seed (dataset, training, MuJoCo episodes, value maps, actor check,
    table, pictures, record, and a rerun that reuses everything) with 16-wide networks, 20 updates and U-maze's
    episodes cut from 300 to 60 steps. The other methods' pieces have tests of their own (here MPPI's step and plan
    costs and the true-dynamics plans; the grid and true-dynamics greedy actions in tests/test_qrl_diagnostics.py);
    the slow test below runs them all."""
    monkeypatch.setitem(maze2d.LAYOUTS, "umaze", dataclasses.replace(maze2d.LAYOUTS["umaze"], episode_length=60))
    _check_benchmark_run(tmp_path, monkeypatch, updates=20, small_networks=True, methods=("qrl",), seeds=(0,))


@pytest.mark.slow  # ~40 s
def test_benchmark_pipeline_for_the_deployable_qrl_policies(tmp_path, monkeypatch):
    """QRL's actor beside the suite's deployable policies (lookahead, waypoints with the actor and with the
    lookahead, MPPI at the scale's paper sample count), end to end as above; each row records its settings and its
    time per action."""
    from platonic_rl.benchmarks import maze2d as bench

    monkeypatch.setitem(maze2d.LAYOUTS, "umaze", dataclasses.replace(maze2d.LAYOUTS["umaze"], episode_length=60))
    rows = ("qrl", "qrl_lookahead", "qrl_waypoints", "qrl_waypoints_lookahead", "mppi_paper_samples")
    _check_benchmark_run(tmp_path, monkeypatch, updates=20, small_networks=True, methods=rows, seeds=(0,))
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["summary"]["qrl_lookahead"]["umaze"]["hold_steps"] == 3
    assert saved["summary"]["qrl_waypoints_lookahead"]["umaze"]["num_waypoints"] == 50
    assert saved["summary"]["mppi_paper_samples"]["umaze"]["single"]["episodes"] == 1
    assert all(saved["summary"][r]["umaze"]["seconds_per_action"] > 0 for r in rows)
    assert all(bench.TABLE[r].label in saved["table"] for r in rows)


@pytest.mark.slow
def test_benchmark_pipeline_with_small_networks(tmp_path, monkeypatch):
    """Every method of the benchmark end to end, two seeds, as above."""
    monkeypatch.setitem(maze2d.LAYOUTS, "umaze", dataclasses.replace(maze2d.LAYOUTS["umaze"], episode_length=60))
    _check_benchmark_run(tmp_path, monkeypatch, updates=20, small_networks=True)


@pytest.mark.slow
def test_benchmark_quick_run(tmp_path, monkeypatch):
    """The quick scale's networks, 200 updates per method."""
    _check_benchmark_run(tmp_path, monkeypatch, updates=200, small_networks=False)


def _check_benchmark_run(tmp_path, monkeypatch, updates: int, small_networks: bool, methods=None, seeds=(0, 1)):
    from platonic_rl.benchmarks import maze2d as bench

    smoke = _small_scale(bench, updates, small_networks)
    every_scale = bench.maze2d_scales
    monkeypatch.setattr(bench, "maze2d_scales", lambda: {**every_scale(), "quick": smoke})
    methods = methods or bench.METHODS
    args = bench.Args(scale="quick", layouts=("umaze",), methods=methods, seeds=seeds, dataset_size=3_000,
                      episodes=1, out_dir=str(tmp_path / "out"), data_root=str(tmp_path / "data"))
    saved = bench.run(args)
    summary = saved["summary"]
    assert set(summary) == set(methods)
    for method in summary:
        for setting in ("single", "multi"):
            r = summary[method]["umaze"][setting]
            assert len(r["scores"]) == len(seeds) and np.isfinite(r["mean"])
    assert saved["datasets"]["umaze"]["transitions"] == 3_000
    assert "NOT comparable" in saved["table"]
    ranks = saved["value_rank_correlation"]["umaze"]
    assert len(ranks) == 2 and all(len(r) == len(seeds) and all(-1 <= x <= 1 for x in r) for r in ranks.values())
    gaps = saved["actor_critic_gap"]["umaze"]
    assert len(gaps) == len(seeds) and all(g[s]["mean_gap"] >= 0 and 0 <= g[s]["above_one_step"] <= 1
                                           for g in gaps for s in ("single goal", "random goals"))
    for name in ("results.json", "values.png", "trajectories.png"):
        assert (tmp_path / "out" / name).is_file()
    assert json.loads((tmp_path / "out" / "results.json").read_text())["command"].startswith("python -m")
    again = bench.run(args)  # a rerun reuses the finished evaluations and the trained runs
    assert again["summary"] == summary
    if "qrl" in methods:  # QRL's critic record: its signals, value maps and actor gaps
        assert {"lagrange_multiplier", "violation", "mean_goal_distance", "flat"} <= set(saved["qrl_signals"]["umaze"])
        assert "QRL's training signals, umaze: " in saved["table"]
        assert (tmp_path / "out" / "evals" / "umaze-qrl_critic.json").is_file()
    # On a new machine the checkpoints are gone: the finished layout is rebuilt from its records, nothing trained;
    # another layout's records from an earlier call (here its dataset's) stay in the record.
    shutil.rmtree(tmp_path / "out" / "runs")
    monkeypatch.setattr(bench, "train_method", lambda *a, **k: pytest.fail("a finished layout was trained again"))
    earlier = dict(source="an earlier call's dataset", transitions=7, episodes=1)
    (tmp_path / "out" / "evals" / "medium-dataset.json").write_text(json.dumps(earlier))
    third = bench.run(args)
    assert third["datasets"] == {"medium": earlier, "umaze": saved["datasets"]["umaze"]}
    assert third["summary"] == summary and third["value_rank_correlation"] == saved["value_rank_correlation"]
    assert third["actor_critic_gap"] == saved["actor_critic_gap"] and (tmp_path / "out" / "values.png").is_file()


def test_true_dynamics_plan_costs_count_the_steps_at_the_goal():
    from platonic_rl.benchmarks import maze2d as bench
    from platonic_rl.envs.point_maze import PointMaze

    env = PointMaze("umaze")
    goal = jnp.asarray([*env.maze.goal, 0.0, 0.0], jnp.float32)
    start = jnp.asarray([env.maze.goal[0] - 0.52, env.maze.goal[1], 0.0, 0.0], jnp.float32)  # 0.52 short
    toward, away = np.zeros((5, 2), np.float32), np.zeros((5, 2), np.float32)
    toward[:, 0], away[:, 0] = 1.0, -1.0  # along +x / -x in D4RL's axes
    costs = np.asarray(bench.true_dynamics_plan_costs(env, start, goal, jnp.asarray(np.stack([toward, away]))))
    for sequence, cost in zip((toward, away), costs):  # by hand: roll out the same dynamics step by step
        physics, reached = dict(position=start[:2], velocity=start[2:]), 0
        for action in sequence:
            physics = env.dynamics(physics, jnp.asarray(action))
            reached += bool(env.reached(env.observe(physics), goal))
        assert cost == -reached
    assert costs[0] <= -2 and costs[1] == 0  # from rest, 5 steps at full action move ~0.036


def test_making_the_env_leaves_no_file_in_the_temporary_directory(tmp_path, monkeypatch):
    """gymnasium-robotics writes each PointMaze's XML next to the system's temporary directories and never deletes
    it; maze2d makes its envs, and writes its Minari datasets (Minari makes the env once more), with a private one,
    removed afterwards."""
    import tempfile

    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    env = maze2d.Maze2D("umaze", 1)
    env.reset(seed=0)
    assert list(temporary.iterdir()) == [] and tempfile.tempdir == str(temporary)
    path = maze2d.write_minari(maze2d.generate("umaze", 400, seed=0, progress=False), "umaze", tmp_path / "data",
                               "test/umaze-v0")
    assert path.is_dir() and list(temporary.iterdir()) == [] and tempfile.tempdir == str(temporary)


def test_a_held_check_record_of_another_hold_length_is_evaluated_again(tmp_path, monkeypatch):
    """``qrl_true_hold``'s record keeps its hold length; a record of another length is not reused as this scale's."""
    from platonic_rl.benchmarks import maze2d as bench

    evaluated = []
    monkeypatch.setattr(bench, "train_method", lambda *a, **k: (None, []))
    monkeypatch.setattr(bench, "critic_record", lambda *a, **k: dict(value_maps=[], value_rank={}, actor_gap=[],
                                                                     signals=dict(flat=True)))
    monkeypatch.setattr(bench, "plot_values", lambda *a, **k: None)  # nothing to draw from the stand-in record
    monkeypatch.setattr(bench.signals, "describe", lambda *a, **k: "")

    def evaluate(method, stack, layout, args, scale, data=None):
        evaluated.append(method)
        return dict(**bench.TABLE[method].settings(scale), seconds_per_action=1e-3,
                    single=dict(mean=1.0, std=0.0, scores=[1.0]),
                    multi=dict(mean=2.0, std=0.0, scores=[2.0]))
    monkeypatch.setattr(bench, "evaluate_method", evaluate)
    args = bench.Args(scale="quick", layouts=("umaze",), methods=("qrl_true_hold",), seeds=(0,), dataset_size=500,
                      out_dir=str(tmp_path / "out"), data_root=str(tmp_path / "data"))
    (tmp_path / "out" / "evals").mkdir(parents=True)
    record = tmp_path / "out" / "evals" / "umaze-qrl_true_hold.json"
    record.write_text(json.dumps(dict(hold_steps=5, single=dict(mean=9.0, std=0.0, scores=[9.0]),
                                      multi=dict(mean=9.0, std=0.0, scores=[9.0]))))
    bench.run(args)
    assert evaluated == ["qrl_true_hold"] and json.loads(record.read_text())["hold_steps"] == 20
    bench.run(args)  # now the record is this scale's: reused
    assert evaluated == ["qrl_true_hold"]


def test_a_ladder_evaluates_each_rung_once_into_its_own_record(tmp_path, monkeypatch):
    """``--ladder NAME=VALUE``: each selected row whose settings hold NAME is evaluated at that value (its record
    named after the rung), reused on a rerun, and listed in results.json's ladder and the table."""
    from platonic_rl.benchmarks import maze2d as bench

    evaluated = []
    monkeypatch.setattr(bench, "train_method", lambda *a, **k: (None, []))
    monkeypatch.setattr(bench, "critic_record", lambda *a, **k: dict(value_maps=[], value_rank={}, actor_gap=[],
                                                                     signals=dict(flat=True)))
    monkeypatch.setattr(bench, "plot_values", lambda *a, **k: None)
    monkeypatch.setattr(bench.signals, "describe", lambda *a, **k: "")

    def evaluate(method, stack, layout, args, scale, data=None):
        evaluated.append((method, scale.policies.hold_steps, scale.policies.reach))
        score = dict(mean=float(scale.policies.hold_steps), std=0.0, scores=[1.0], episodes=2)
        return dict(**bench.TABLE[method].settings(scale), seconds_per_action=1e-3, single=score, multi=score)
    monkeypatch.setattr(bench, "evaluate_method", evaluate)
    args = bench.Args(scale="quick", layouts=("umaze",), methods=("gcbc", "qrl_lookahead", "qrl_waypoints"),
                      seeds=(0,), dataset_size=500, ladder=("hold_steps=3", "reach=7"),
                      out_dir=str(tmp_path / "out"), data_root=str(tmp_path / "data"))
    saved = bench.run(args)
    quick = bench.maze2d_scales()["quick"].policies
    k, h = quick.hold_steps, quick.reach
    assert evaluated == [("qrl_lookahead", k, h), ("qrl_waypoints", k, h), ("gcbc", k, h), ("qrl_lookahead", 3, h),
                         ("qrl_waypoints", k, 7.0)]  # gcbc has neither setting; the waypoints no hold
    assert set(saved["ladder"]["umaze"]) == {"qrl_lookahead@hold_steps=3", "qrl_waypoints@reach=7.0"}
    assert saved["ladder"]["umaze"]["qrl_lookahead@hold_steps=3"]["hold_steps"] == 3
    assert "qrl_lookahead@hold_steps=3" in saved["table"]
    bench.run(args)  # every rung's record is current: nothing evaluated again
    assert len(evaluated) == 5
    with pytest.raises(ValueError, match="--ladder entries must be NAME=VALUE"):
        bench.Args(ladder=("k=5",))
