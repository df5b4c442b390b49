"""OGBench's point mazes (Park et al. 2024): the ``pointmaze-{medium,large,giant,teleport}-{navigate,stitch}-v0``
datasets generated on this machine with OGBench's procedure, stored in OGBench's ``.npz`` layout, and OGBench's
evaluation (five fixed tasks per maze, success rate). Needs the ``ogbench`` package (``pip install -e ".[ogbench]"``); nothing is
downloaded.

    path = ogbench_maze.make_dataset("pointmaze-medium-navigate-v0")     # generated once, then read from the cache
    data = training.offline.load_dataset(path)                           # OGBench's layout as flat transitions
    result = ogbench_maze.evaluate(policy, "pointmaze-medium-navigate-v0", episodes_per_task=50)

**The environment** is OGBench's own (``ogbench.locomaze``, MuJoCo): a point whose position moves by 0.2 x the
action (in [-1, 1]^2) per step, stopped by the walls; cells are 4 x 4 units; the observation and the goal are the
point's (x, y); success is being within 1.0 of the goal. In the teleport maze, entering a teleporter moves the
point to one of three exits drawn at random (the controller's BFS ignores them, as OGBench's does).

**Datasets** follow OGBench's ``generate_locomaze.py`` with its point-maze arguments: every episode starts at a
uniformly random free cell and is driven by the oracle controller -- the unit vector towards the next cell of a BFS
shortest path to the goal (the env's ``get_oracle_subgoal``) -- plus N(0, 0.5^2) per dimension, clipped to
[-1, 1]. ``navigate``: 1,000 episodes of 1,001 steps (giant: 500 of 2,001); the goal, a random vertex cell (any
free cell but a straight corridor's), is drawn again each time it is reached. ``stitch``: 5,000 episodes of 201 steps towards a
cell 4 BFS steps from the start, and staying there. A validation set of a tenth as many further episodes is written
beside (``-val.npz``), as OGBench does. The env draws its cell noise from NumPy's global generator (as OGBench's
script does); :func:`generate` and :func:`evaluate` seed it for their duration and restore it after.

**OGBench's .npz layout**: ``observations [N, 2]``, ``actions [N, 2]`` (float32), ``terminals [N]`` (True at each
episode's last step), ``qpos [N, 2]``, ``qvel [N, 2]``. An episode's last step has no next observation;
:func:`transitions` (which ``training.offline.load_dataset`` applies to files in this layout -- ours, or OGBench's
own downloaded files) drops it, as OGBench's loader does, and gives the suite's flat transitions.

**Evaluation** (OGBench's): for each of the maze's five tasks (a fixed start and goal cell, both with U(-1, 1)
noise per coordinate), ``episodes_per_task`` episodes of at most 1,000 steps, each ending when it succeeds; the
score is the success rate in percent, per task and over tasks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from platonic_rl.common.policies import start_episodes
from platonic_rl.envs.maze2d import grid_distances
from platonic_rl.envs.temporary_files import private_temporary_directory

ACTION_NOISE = 0.5
EVAL_STEPS = 1_000
NUM_TASKS = 5


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    env_name: str           # OGBench's environment id
    kind: str               # "navigate" or "stitch"
    episodes: int           # training episodes (the validation set has a tenth more)
    steps: int              # steps per episode
    discount: float = 0.99  # OGBench's agents' discount on this dataset (its commands: 0.995 on the giant maze)

    @property
    def actor_random_goals(self) -> float:
        """The share of OGBench's actor goals that are random dataset states (its commands' ``actor_p_randomgoal``:
        0.5 on the stitch datasets, whose episodes are too short to hold the tasks' goals, else 0)."""
        return 0.5 if self.kind == "stitch" else 0.0


DATASETS = {
    "pointmaze-medium-navigate-v0": DatasetSpec("pointmaze-medium-v0", "navigate", 1_000, 1_001),
    "pointmaze-large-navigate-v0": DatasetSpec("pointmaze-large-v0", "navigate", 1_000, 1_001),
    "pointmaze-medium-stitch-v0": DatasetSpec("pointmaze-medium-v0", "stitch", 5_000, 201),
    "pointmaze-large-stitch-v0": DatasetSpec("pointmaze-large-v0", "stitch", 5_000, 201),
    "pointmaze-giant-navigate-v0": DatasetSpec("pointmaze-giant-v0", "navigate", 500, 2_001, 0.995),
    "pointmaze-giant-stitch-v0": DatasetSpec("pointmaze-giant-v0", "stitch", 5_000, 201, 0.995),
    "pointmaze-teleport-navigate-v0": DatasetSpec("pointmaze-teleport-v0", "navigate", 1_000, 1_001),
    "pointmaze-teleport-stitch-v0": DatasetSpec("pointmaze-teleport-v0", "stitch", 5_000, 201),
}


def get_spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, got {name!r}")
    return DATASETS[name]


def make_env(env_name: str, **kwargs):
    """OGBench's environment (the ``gymnasium.make`` object); a clear error when ``ogbench`` is missing."""
    try:
        import ogbench.locomaze  # noqa: F401  (registers the environments)
    except ImportError:
        raise ImportError("OGBench's point mazes need the ogbench package: pip install -e \".[ogbench]\"") from None
    import gymnasium

    with private_temporary_directory(prefix="platonic_rl_ogbench_"):  # its maze XML goes with the directory
        return gymnasium.make(env_name, **kwargs)


@contextlib.contextmanager
def seeded_global_numpy(seed: int):
    """NumPy's global generator seeded with ``seed`` inside the block and restored after (OGBench's env draws its
    cell noise from it)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


# ------------------------------------------------------------------------------------------- cells


def free_cells(maze_map: np.ndarray) -> list[tuple[int, int]]:
    """Every free cell (row, column), row-major."""
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(np.asarray(maze_map) == 0))]


def vertex_cells(maze_map: np.ndarray) -> list[tuple[int, int]]:
    """The free cells that are not inside a straight corridor (free above and below with walls left and right, or
    the other way round): where OGBench's navigate datasets put their goals."""
    m = np.asarray(maze_map)
    out = []
    for i, j in free_cells(m):
        vertical = m[i - 1, j] == 0 and m[i + 1, j] == 0 and m[i, j - 1] == 1 and m[i, j + 1] == 1
        horizontal = m[i, j - 1] == 0 and m[i, j + 1] == 0 and m[i - 1, j] == 1 and m[i + 1, j] == 1
        if not (vertical or horizontal):
            out.append((i, j))
    return out


def bfs_steps(maze_map: np.ndarray, start: tuple[int, int]) -> np.ndarray:
    """Steps between ``start`` and every cell over free 4-neighbours (``envs.maze2d.grid_distances``); -1 for walls
    and unreachable cells."""
    dist = grid_distances(np.asarray(maze_map) == 1, start)
    return np.where(np.isfinite(dist), dist, -1).astype(int)


def oracle_subgoal(env, xy: np.ndarray, goal_xy: np.ndarray, cache: dict) -> np.ndarray:
    """The centre of the cell a BFS shortest path from ``xy``'s cell to ``goal_xy``'s goes to next (``xy``'s own cell
    at the goal's): the env's ``get_oracle_subgoal``, with the goal cell's BFS kept in ``cache`` instead of redone
    every step (the same first-best neighbour order: up, left, down, right)."""
    i, j = env.xy_to_ij(xy)
    goal = env.xy_to_ij(goal_xy)
    if goal not in cache:
        cache[goal] = bfs_steps(env.maze_map, goal)
    steps = cache[goal]
    best = (i, j)
    for di, dj in ((-1, 0), (0, -1), (1, 0), (0, 1)):
        a, b = i + di, j + dj
        if 0 <= a < steps.shape[0] and 0 <= b < steps.shape[1] and env.maze_map[a, b] == 0 \
                and steps[a, b] < steps[best]:
            best = (a, b)
    return np.array(env.ij_to_xy(best), np.float64)


def stitch_goal_cells(maze_map: np.ndarray, start: tuple[int, int], distance: int = 4) -> list[tuple[int, int]]:
    """The cells exactly ``distance`` BFS steps from ``start`` (a stitch episode's goal is one of them)."""
    steps = bfs_steps(maze_map, start)
    return [(int(i), int(j)) for i, j in zip(*np.nonzero(steps == distance))]


# ------------------------------------------------------------------------------------------- datasets


def generate(name: str, seed: int = 0, episodes: int | None = None, progress: bool = True
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """OGBench's procedure for dataset ``name`` (module docstring): ``(train, validation)`` arrays in OGBench's
    layout. ``episodes`` defaults to OGBench's (1,000 navigate, 5,000 stitch); the validation set has
    ``episodes // 10``."""
    from tqdm.auto import tqdm

    spec = get_spec(name)
    episodes = spec.episodes if episodes is None else episodes
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    env = make_env(spec.env_name, terminate_at_goal=False).unwrapped  # episodes end after spec.steps steps
    maze_map = env.maze_map
    cells, vertices = free_cells(maze_map), vertex_cells(maze_map)
    bfs_cache: dict = {}
    total = episodes + episodes // 10
    rows = total * spec.steps
    out = dict(observations=np.empty((rows, 2), np.float32), actions=np.empty((rows, 2), np.float32),
               terminals=np.zeros(rows, bool), qpos=np.empty((rows, 2), np.float32),
               qvel=np.empty((rows, 2), np.float32))
    with seeded_global_numpy(seed):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        n = 0
        for _ in tqdm(range(total), desc=name, unit="episode", disable=not progress, mininterval=1.0):
            start = cells[np.random.randint(len(cells))]
            if spec.kind == "navigate":
                goal = vertices[np.random.randint(len(vertices))]
            else:
                near = stitch_goal_cells(maze_map, start)
                goal = near[np.random.randint(len(near))] if near else start
            ob, _ = env.reset(options=dict(task_info=dict(init_ij=start, goal_ij=goal)))
            for t in range(spec.steps):
                xy = env.get_xy()
                subgoal = oracle_subgoal(env, xy, env.cur_goal_xy, bfs_cache)
                direction = subgoal - xy
                direction = direction / (np.linalg.norm(direction) + 1e-6)
                action = np.clip(direction + np.random.normal(0.0, ACTION_NOISE, 2), -1.0, 1.0)
                next_ob, _, _, _, info = env.step(action)
                if info["success"] and spec.kind == "navigate":
                    env.set_goal(vertices[np.random.randint(len(vertices))])
                out["observations"][n], out["actions"][n] = ob, action
                out["qpos"][n], out["qvel"][n] = info["prev_qpos"], info["prev_qvel"]
                out["terminals"][n] = t == spec.steps - 1
                ob, n = next_ob, n + 1
    split = episodes * spec.steps
    return {k: v[:split] for k, v in out.items()}, {k: v[split:] for k, v in out.items()}


def default_root() -> Path:
    """Where generated datasets are cached: ``$PLATONIC_RL_DATA/ogbench`` or ``~/.cache/platonic_rl/ogbench``."""
    base = os.environ.get("PLATONIC_RL_DATA")
    return Path(base) / "ogbench" if base else Path.home() / ".cache" / "platonic_rl" / "ogbench"


def make_dataset(name: str, seed: int = 0, episodes: int | None = None, root: str | os.PathLike | None = None,
                 progress: bool = True) -> Path:
    """The training file of a generated dataset: ``<root>/seed<seed>[-<episodes>ep]/<name>.npz`` (OGBench's file
    name) beside ``<name>-val.npz`` and ``<name>.json`` (how it was generated); generated on the first call, then
    read from there."""
    spec = get_spec(name)
    folder = Path(root) if root is not None else default_root()
    folder = folder / (f"seed{seed}" + ("" if episodes in (None, spec.episodes) else f"-{episodes}ep"))
    path = folder / f"{name}.npz"
    if path.is_file():
        return path
    start = time.perf_counter()
    train, val = generate(name, seed, episodes, progress)
    seconds = time.perf_counter() - start
    folder.mkdir(parents=True, exist_ok=True)
    for target, arrays in ((path, train), (folder / f"{name}-val.npz", val)):
        partial = target.with_name(target.stem + ".partial.npz")
        np.savez_compressed(partial, **arrays)
        partial.replace(target)
    info = dict(dataset=name, env=spec.env_name, kind=spec.kind, seed=seed,
                episodes=int(train["terminals"].sum()), steps_per_episode=spec.steps, action_noise=ACTION_NOISE,
                generation_seconds=round(seconds, 2), generator="platonic_rl.envs.ogbench_maze.generate (OGBench's generate_locomaze.py procedure)")
    (folder / f"{name}.json").write_text(json.dumps(info, indent=1))
    return path


def generation_info(path: str | os.PathLike, *keys: str) -> dict:
    """What :func:`make_dataset` wrote beside the dataset at ``path`` about its generation (``<name>.json``), the
    ``keys`` asked for that it holds (datasets generated before a key was recorded lack it); empty where there is no
    such file (a dataset from elsewhere)."""
    info_path = Path(path).with_suffix(".json")
    if not info_path.is_file():
        return {}
    info = json.loads(info_path.read_text())
    return {k: info[k] for k in keys if k in info}


def is_ogbench_layout(arrays) -> bool:
    """Whether a dataset's keys are OGBench's (``observations``, ``actions``, ``terminals``; no next
    observations)."""
    keys = set(arrays)
    return {"observations", "actions", "terminals"} <= keys and "next_observations" not in keys


def transitions(arrays) -> dict[str, np.ndarray]:
    """OGBench's layout as the suite's flat transitions: each episode's rows but its last (``terminals``), with
    ``next_observations`` the following row, ``rewards`` -1 per step and ``segment_end`` True at each episode's last
    kept transition. Rows after the last terminal (an unfinished episode) are refused."""
    obs = np.asarray(arrays["observations"])
    terminals = np.asarray(arrays["terminals"]).astype(bool)
    actions = np.asarray(arrays["actions"])
    if terminals.ndim != 1 or len(terminals) != len(obs) or len(actions) != len(obs):
        raise ValueError(f"OGBench layout: observations, actions and terminals need one common length, got "
                         f"{len(obs)}, {len(actions)}, {len(terminals)} (terminals must be [N])")
    if not terminals.any() or not terminals[-1]:
        raise ValueError("OGBench layout: terminals[-1] must be True (the last episode ends at the last row)")
    starts = np.concatenate([[True], terminals[:-1]])
    if np.any(starts & terminals):
        raise ValueError("OGBench layout: an episode of one step has no transition (two terminals in a row, or "
                         "terminals[0])")
    keep = ~terminals
    segment_end = np.concatenate([terminals[1:], [True]])[keep]
    return dict(observations=obs[keep], actions=actions[keep], next_observations=obs[np.concatenate([[False], keep[:-1]])],
                rewards=-np.ones(int(keep.sum()), np.float32), segment_end=segment_end)


# ------------------------------------------------------------------------------------------- evaluation


def maze_extent(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(center, half_size)`` of the maze's free area in (x, y) (cell centres +- half a cell): a fixed input
    normaliser."""
    env = make_env(get_spec(name).env_name).unwrapped
    centres = np.array([env.ij_to_xy(c) for c in free_cells(env.maze_map)], np.float64)
    low, high = centres.min(0) - 2.0, centres.max(0) + 2.0
    return (low + high) / 2, (high - low) / 2


def evaluate(policy: Callable[[np.ndarray, np.ndarray], np.ndarray], name: str, episodes_per_task: int = 50,
             seed: int = 0, keep_trajectories: int = 0) -> dict:
    """OGBench's evaluation of ``policy(observations [N, 2], goals [N, 2]) -> actions [N, 2]`` on the maze of
    dataset ``name``: ``episodes_per_task`` episodes at once per task. Returns ``success`` (percent, over tasks),
    ``task_success`` (percent per task), ``steps`` (per task and episode; 1,000 where it failed) and, for the first
    ``keep_trajectories`` episodes of each task, their positions and goals."""
    if isinstance(episodes_per_task, bool) or not isinstance(episodes_per_task, (int, np.integer)) \
            or episodes_per_task < 1:
        raise ValueError(f"episodes_per_task must be an int >= 1, got {episodes_per_task!r}")
    spec = get_spec(name)
    envs = [make_env(spec.env_name).unwrapped for _ in range(episodes_per_task)]
    task_success, steps, trajectories = [], [], []
    with seeded_global_numpy(seed):
        for k, env in enumerate(envs):
            env.reset(seed=seed * 100_003 + k)
        for task in range(1, NUM_TASKS + 1):
            start_episodes(policy)
            resets = [env.reset(options=dict(task_id=task)) for env in envs]
            obs = np.stack([ob for ob, _ in resets]).astype(np.float32)
            goals = np.stack([info["goal"] for _, info in resets]).astype(np.float32)
            running = np.ones(len(envs), bool)
            taken = np.full(len(envs), EVAL_STEPS)
            path = [obs[:keep_trajectories].copy()]
            for t in range(EVAL_STEPS):
                actions = np.asarray(policy(obs, goals), np.float64)
                if actions.shape != (len(envs), 2):
                    raise ValueError(f"policy must return actions [{len(envs)}, 2], got {actions.shape}")
                for i in np.flatnonzero(running):
                    ob, _, _, _, info = envs[i].step(np.clip(actions[i], -1.0, 1.0))
                    obs[i] = ob
                    if info["success"]:
                        running[i], taken[i] = False, t + 1
                path.append(obs[:keep_trajectories].copy())
                if not running.any():
                    break
            task_success.append(100.0 * float(np.mean(~running)))
            steps.append(taken)
            if keep_trajectories:
                trajectories.append(dict(positions=np.stack(path, 1), goals=goals[:keep_trajectories]))
    return dict(success=float(np.mean(task_success)), task_success=task_success, steps=np.stack(steps),
                trajectories=trajectories)
