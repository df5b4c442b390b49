"""D4RL maze2d (umaze, medium, large) on MuJoCo through gymnasium-robotics' PointMaze, with D4RL's conventions.

    layout = maze2d.get_layout("medium")
    path = maze2d.make_dataset("medium", size=100_000, seed=0)        # generated once, then read from the cache
    data = maze2d.load_dataset(path, layout="medium")                  # flat arrays in D4RL's coordinates
    result = maze2d.evaluate(policy, layout, mode="single", episodes=100, seed=0)

**Physics** is gymnasium-robotics' ``PointMaze_{UMaze,Medium,Large}-v3`` model -- the same point mass, walls,
timestep (0.01 s), damping, gear and velocity clipping (+-5) as D4RL's ``MazeEnv`` -- stepped directly with
``mujoco.mj_step`` on one ``MjData`` per episode (no wrappers: 9 us per step here).

**D4RL's conventions**, where PointMaze-v3 differs:

* observations ``[x, y, vx, vy]`` in D4RL's coordinates: D4RL's ``qpos``, in which maze cell (row i, column j)
  is centred at ``(i - 0.2, j - 0.2)`` (D4RL's particle body sits 0.2 off the wall grid) and the goal of a cell
  is the point ``(i, j)``. PointMaze centres the maze at the origin with y pointing up; the exact map is
  :func:`to_d4rl` / :func:`from_d4rl` (a rotation by 90 degrees plus a shift, actions rotated alike);
* sparse reward 1 when the point is within 0.5 of the goal (D4RL; PointMaze-v3 uses 0.45), episodes never
  terminate, time limits 300 / 600 / 800 steps;
* single-goal evaluation towards D4RL's fixed goal cell (the ``G`` of its maze strings: umaze (1, 1), medium
  (6, 6), large (7, 9)); starts at a uniformly random free cell + U(-0.1, 0.1), velocity N(0, 0.1^2);
* normalised score ``100 (R - min) / (max - min)`` with D4RL's sparse-reward reference (min, max).

Multi-goal evaluation (Diffuser's ``multi2d``) draws the goal, like the start, from a uniformly random free
cell + U(-0.1, 0.1).

**Datasets** follow D4RL's generation script: one long trajectory driven by :class:`WaypointController` (a
shortest path on the cell grid -- D4RL runs Q-iteration, which gives a shortest path --, waypoints at the
path's cells minus U(0, 0.2) per coordinate, PD control ``clip(10 (waypoint - position) - velocity, -1,
1)``), re-targeted to a random free cell (+ U(-0.1, 0.1)) when the target is reached (within 0.1) or after
the time limit. Segments with one target are the episodes. (D4RL's script, at a re-target, kept recording
the pre-step observation while the simulator moved on, leaving one inconsistent transition per segment; the
trajectory here stays continuous.) Sizes default to D4RL's: umaze 1M, medium 2M, large 4M transitions.
As in D4RL's released data (its ``--noisy`` generation; Minari's recreation and OGBench's point-maze datasets
use the same noise), every recorded and executed action is the controller's plus N(0, 0.5^2) per dimension,
then clipped to [-1, 1] (``action_noise``; 0 gives the noise-free controller). The noise changes the data:
about 55% of noisy actions are saturated in a dimension against 86% without, and segments end less often
(about 12,500 per 1M umaze steps against 13,600; D4RL's maze2d-umaze-v1 has 12,459). The noise level is part
of a generated dataset's id (:func:`dataset_id`) and recorded in its description and ``generation.json``, so
a noise-free dataset is never read as a noisy one.

Datasets are stored as **Minari datasets** (written with ``minari``, HDF5 storage), in the same form as the
official ``D4RL/pointmaze/*-v2`` datasets: dict observations ``observation`` / ``achieved_goal`` /
``desired_goal`` in PointMaze's coordinates, one Minari episode per segment. :func:`load_dataset` reads
them back through ``minari`` -- ours, the official ones (a local copy: nothing is downloaded) or any
PointMaze dataset of the same maze -- and also D4RL's own ``maze2d-*.hdf5`` files (segmented where
``infos/goal`` changes). OGBench's pointmaze datasets use other mazes (4x larger cells, other layouts) and
do not load here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import warnings
from collections import deque
from pathlib import Path
from typing import Callable

import jax.numpy as jnp
import numpy as np

from platonic_rl.common.policies import start_episodes
from platonic_rl.envs.temporary_files import private_temporary_directory

# D4RL's maze strings ('#' wall, 'O' free, 'G' the goal cell), rows separated by '\'.
U_MAZE = "#####\\#GOO#\\###O#\\#OOO#\\#####"
MEDIUM_MAZE = "########\\#OO##OO#\\#OO#OOO#\\##OOO###\\#OO#OOO#\\#O#OO#O#\\#OOO#OG#\\########"
LARGE_MAZE = ("############\\#OOOO#OOOOO#\\#O##O#O#O#O#\\#OOOOOO#OOO#\\#O####O###O#\\#OO#O#OOOOO#\\"
              "##O#O#O#O###\\#OO#OOO#OGO#\\############")

CELL_OFFSET = 0.2   # D4RL's cell (i, j) is centred at (i - 0.2, j - 0.2)
GOAL_RADIUS = 0.5   # sparse reward within this distance of the goal
ACTION_NOISE = 0.5  # D4RL's --noisy generation: N(0, 0.5^2) added to each action before clipping
MAX_VELOCITY = 5.0  # velocities are clipped to +-5 before every step (D4RL, PointMaze)


@dataclasses.dataclass(frozen=True)
class Layout:
    name: str
    maze: str                   # D4RL's maze string
    goal_cell: tuple[int, int]  # D4RL's fixed goal (row, column)
    episode_length: int         # D4RL's time limit
    ref_min_score: float        # D4RL's sparse-reward reference returns
    ref_max_score: float
    dataset_size: int           # D4RL's dataset size (transitions)
    gym_id: str                 # the gymnasium-robotics PointMaze with this map

    @property
    def walls(self) -> np.ndarray:
        """``[rows, columns]`` bool, True at walls."""
        return np.array([[c == "#" for c in row] for row in self.maze.split("\\")])

    @property
    def shape(self) -> tuple[int, int]:
        return self.walls.shape

    @property
    def free_cells(self) -> np.ndarray:
        """``[n, 2]`` (row, column) of every free cell (goal included), sorted (D4RL's reset locations)."""
        return np.argwhere(~self.walls)

    @property
    def goal(self) -> np.ndarray:
        """D4RL's single goal position ``[2]``."""
        return np.asarray(self.goal_cell, np.float64)

    @property
    def obs_center(self) -> np.ndarray:
        rows, cols = self.shape
        return np.array([(rows - 1) / 2 - CELL_OFFSET, (cols - 1) / 2 - CELL_OFFSET, 0.0, 0.0])

    @property
    def obs_scale(self) -> np.ndarray:
        """Maps the maze's positions to about [-1, 1] and velocities (|v| <= 5) to [-1, 1]."""
        rows, cols = self.shape
        return np.array([(rows - 2) / 2, (cols - 2) / 2, MAX_VELOCITY, MAX_VELOCITY])


LAYOUTS = {
    "umaze": Layout("umaze", U_MAZE, (1, 1), 300, 23.85, 161.86, 1_000_000, "PointMaze_UMaze-v3"),
    "medium": Layout("medium", MEDIUM_MAZE, (6, 6), 600, 13.13, 277.39, 2_000_000, "PointMaze_Medium-v3"),
    "large": Layout("large", LARGE_MAZE, (7, 9), 800, 6.7, 273.99, 4_000_000, "PointMaze_Large-v3"),
}


def get_layout(layout: str | Layout) -> Layout:
    """A :class:`Layout` by name ("umaze", "medium", "large"); a Layout is returned as it is."""
    if isinstance(layout, Layout):
        return layout
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)}, got {layout!r}")
    return LAYOUTS[layout]


def normalized_score(layout: str | Layout, returns) -> np.ndarray:
    """D4RL's normalised score ``100 (R - min) / (max - min)`` (100: D4RL's reference controller)."""
    layout = get_layout(layout)
    return 100.0 * (np.asarray(returns, np.float64) - layout.ref_min_score) / (
        layout.ref_max_score - layout.ref_min_score)


def normaliser(layout: str | Layout) -> Callable:
    """``x -> (x - obs_center) / obs_scale`` as float32 JAX arrays (jit-able): the layout's positions to about
    [-1, 1] and velocities to [-1, 1], the inputs the maze2d agents train and act on. Works on states and goals
    ``[..., 4]``."""
    layout = get_layout(layout)
    center, scale = (jnp.asarray(x, jnp.float32) for x in (layout.obs_center, layout.obs_scale))
    return lambda x: (jnp.asarray(x, jnp.float32) - center) / scale


def normalised_data(data: dict, layout: str | Layout) -> dict:
    """A :func:`load_dataset` dataset as the agents train on it: observations normalised by the layout's extent
    (:func:`normaliser`), float32 actions, and the segment ends (NumPy arrays)."""
    norm = normaliser(layout)
    return dict(observations=np.asarray(norm(data["observations"])), actions=np.asarray(data["actions"], np.float32),
                next_observations=np.asarray(norm(data["next_observations"])), segment_end=data["segment_end"])


# ------------------------------------------------------------------------------------ coordinates


def _as_float(x, xp):
    return np.asarray(x, np.float64) if xp is np else xp.asarray(x)


def to_d4rl(layout: str | Layout, xy, xp=np):
    """PointMaze positions ``[..., 2]`` (or ``[..., 4]`` position + velocity) -> D4RL's coordinates. ``xp``: the
    array module (``numpy``, float64; or ``jax.numpy``, jit-able)."""
    rows, cols = get_layout(layout).shape
    xy = _as_float(xy, xp)
    parts = [rows / 2 - 0.5 - CELL_OFFSET - xy[..., 1], xy[..., 0] + cols / 2 - 0.5 - CELL_OFFSET]
    if xy.shape[-1] == 4:
        parts += [-xy[..., 3], xy[..., 2]]
    return xp.stack(parts, -1)


def from_d4rl(layout: str | Layout, ab, xp=np):
    """The inverse of :func:`to_d4rl`."""
    rows, cols = get_layout(layout).shape
    ab = _as_float(ab, xp)
    parts = [ab[..., 1] - cols / 2 + 0.5 + CELL_OFFSET, rows / 2 - 0.5 - CELL_OFFSET - ab[..., 0]]
    if ab.shape[-1] == 4:
        parts += [ab[..., 3], -ab[..., 2]]
    return xp.stack(parts, -1)


def action_from_d4rl(actions, xp=np):
    """D4RL actions (forces along its two axes) -> PointMaze actions (along x, y)."""
    actions = xp.asarray(actions)
    return xp.stack([actions[..., 1], -actions[..., 0]], -1)


def action_to_d4rl(actions: np.ndarray) -> np.ndarray:
    actions = np.asarray(actions)
    return np.stack([-actions[..., 1], actions[..., 0]], -1)


def cell_of(positions: np.ndarray) -> np.ndarray:
    """The cell ``[..., 2]`` (int) holding each D4RL position (cell centres are at index - 0.2)."""
    return np.rint(np.asarray(positions)[..., :2] + CELL_OFFSET).astype(np.int64)


# ------------------------------------------------------------------------------ shortest paths


GRID_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


def cell_distances(layout: str | Layout, target: tuple[int, int]) -> np.ndarray:
    """Breadth-first shortest-path lengths (in cells, 4-connected) from every cell to ``target``; inf at
    walls and unreachable cells."""
    return grid_distances(get_layout(layout).walls, target)


def grid_distances(walls: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """:func:`cell_distances` on any grid of ``walls`` (True = wall) bordered by walls (OGBench's mazes use it
    too)."""
    walls = np.asarray(walls, bool)
    target = tuple(int(t) for t in target)
    if walls[target]:
        raise ValueError(f"target cell {target} is a wall")
    dist = np.full(walls.shape, np.inf)
    dist[target] = 0
    queue = deque([target])
    while queue:
        i, j = queue.popleft()
        for di, dj in GRID_MOVES:
            n = (i + di, j + dj)
            if not walls[n] and dist[n] == np.inf:
                dist[n] = dist[i, j] + 1
                queue.append(n)
    return dist


def shortest_path(layout: str | Layout, start: tuple[int, int], target: tuple[int, int]) -> list[tuple[int, int]]:
    """The cells after ``start`` on a shortest path to ``target`` (``[target]`` if they are equal)."""
    dist = cell_distances(layout, target)
    cell, path = tuple(int(s) for s in start), []
    if not np.isfinite(dist[cell]):
        raise ValueError(f"no path from cell {cell} to {tuple(target)}")
    while dist[cell] > 0:
        cell = min(((cell[0] + di, cell[1] + dj) for di, dj in GRID_MOVES), key=lambda n: dist[n])
        path.append(cell)
    return path or [tuple(int(t) for t in target)]


class WaypointController:
    """D4RL's maze2d data-collection controller, in D4RL's coordinates.

    On a new target cell it plans the cells of a shortest path from the current cell; each waypoint is its
    cell's point minus U(0, 0.2) per coordinate (the last one, the target cell, without noise). The action
    is ``clip(p_gain (waypoint - position) + d_gain velocity, -1, 1)``; a waypoint within ``solve_thresh``
    is passed, and the task is solved within ``solve_thresh`` of the target cell (the controller then
    holds the point there)."""

    def __init__(self, layout: str | Layout, rng: np.random.Generator, solve_thresh: float = 0.1,
                 p_gain: float = 10.0, d_gain: float = -1.0):
        self.layout = get_layout(layout)
        self.rng, self.solve_thresh, self.p_gain, self.d_gain = rng, solve_thresh, p_gain, d_gain
        self.target_cell: tuple[int, int] | None = None
        self._paths: dict = {}

    def _plan(self, position, target_cell):
        start = tuple(cell_of(position))
        key = (start, target_cell)
        if key not in self._paths:
            self._paths[key] = shortest_path(self.layout, start, target_cell)
        cells = np.array(self._paths[key], np.float64)
        noise = self.rng.uniform(size=cells.shape) * 0.2
        noise[-1] = 0.0  # the last cell is the target cell: no noise
        self.waypoints, self.index, self.target_cell = cells - noise, 0, target_cell
        self.prev_position = np.asarray(position, np.float64).copy()

    def action(self, position, velocity, target) -> tuple[np.ndarray, bool]:
        """``(action [2], solved)`` for the point at ``position`` / ``velocity`` heading to ``target``."""
        target_cell = tuple(cell_of(target)) if not isinstance(target, tuple) else target
        if target_cell != self.target_cell:
            self._plan(position, target_cell)
        position = np.asarray(position, np.float64)
        goal = np.asarray(target_cell, np.float64)
        moved = np.linalg.norm(self.prev_position - position)
        solved = np.linalg.norm(position - goal) < self.solve_thresh and moved < 0.1
        waypoint = goal if solved else self.waypoints[self.index]
        action = self.p_gain * (waypoint - position) + self.d_gain * np.asarray(velocity)
        if not solved and np.linalg.norm(position - waypoint) < self.solve_thresh and moved < 0.1:
            self.index = min(self.index + 1, len(self.waypoints) - 1)
        self.prev_position = position
        return np.clip(action, -1.0, 1.0), bool(solved)


# ------------------------------------------------------------------------------ the environment


def make_pointmaze(gym_id: str, **kwargs):
    """``gym.make(gym_id, **kwargs)`` for gymnasium-robotics' PointMaze without the file it leaves behind: its maze
    builder writes the model's XML into the system's temporary directory (``ant_maze<time>.xml``) and never deletes
    it, one file per env made. Made in a :func:`~platonic_rl.envs.temporary_files.private_temporary_directory`, removed
    once the model is loaded."""
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    with private_temporary_directory(prefix="platonic_rl_pointmaze_"):
        return gym.make(gym_id, **kwargs)


class Maze2D:
    """``num_envs`` point masses in one maze, stepped together (D4RL's coordinates and rewards).

        env = Maze2D("medium", num_envs=100)
        obs = env.reset(seed=0, mode="single")        # [100, 4]; env.goals [100, 2]
        obs, rewards = env.step(actions)              # actions [100, 2] in [-1, 1] (clipped, as D4RL)
    """

    def __init__(self, layout: str | Layout, num_envs: int = 1):
        import gymnasium as gym
        import gymnasium_robotics
        import mujoco

        self.layout = get_layout(layout)
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        gym.register_envs(gymnasium_robotics)
        pointmaze = make_pointmaze(self.layout.gym_id).unwrapped
        self.model = pointmaze.point_env.model
        self._mujoco = mujoco
        self.datas = [mujoco.MjData(self.model) for _ in range(num_envs)]
        self.num_envs = int(num_envs)
        self.goals = np.tile(self.layout.goal, (self.num_envs, 1))

    def _random_positions(self, rng: np.random.Generator, n: int) -> np.ndarray:
        cells = self.layout.free_cells[rng.integers(len(self.layout.free_cells), size=n)]
        return cells + rng.uniform(-0.1, 0.1, size=(n, 2))

    def reset(self, seed: int | None = None, mode: str = "single", starts: np.ndarray | None = None,
              goals: np.ndarray | None = None) -> np.ndarray:
        """Starts at random free cells (+ U(-0.1, 0.1), velocity N(0, 0.1^2)) unless ``starts`` ``[N, 2]`` is
        given; goals: D4RL's (``mode="single"``), random free cells (``"multi"``), or ``goals`` ``[N, 2]``."""
        if mode not in ("single", "multi"):
            raise ValueError(f"mode must be 'single' or 'multi', got {mode!r}")
        rng = np.random.default_rng(seed)
        n = self.num_envs
        positions = self._random_positions(rng, n) if starts is None else np.asarray(starts, np.float64)
        velocities = rng.normal(0.0, 0.1, size=(n, 2))
        if goals is not None:
            self.goals = np.asarray(goals, np.float64).reshape(n, 2)
        elif mode == "single":
            self.goals = np.tile(self.layout.goal, (n, 1))
        else:
            self.goals = self._random_positions(rng, n)
        state = from_d4rl(self.layout, np.concatenate([positions, velocities], -1))
        for data, s in zip(self.datas, state):
            self._mujoco.mj_resetData(self.model, data)
            data.qpos[:], data.qvel[:] = s[:2], s[2:]
            self._mujoco.mj_forward(self.model, data)
        return self.observations()

    def observations(self) -> np.ndarray:
        state = np.array([np.concatenate([d.qpos, d.qvel]) for d in self.datas])
        return to_d4rl(self.layout, state)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        actions = np.asarray(actions, np.float64)
        if actions.shape != (self.num_envs, 2):
            raise ValueError(f"actions must have shape ({self.num_envs}, 2), got {actions.shape}")
        controls = action_from_d4rl(np.clip(actions, -1.0, 1.0))
        for data, u in zip(self.datas, controls):
            data.qvel[:] = np.clip(data.qvel, -MAX_VELOCITY, MAX_VELOCITY)
            data.ctrl[:] = u
            self._mujoco.mj_step(self.model, data)
        obs = self.observations()
        rewards = (np.linalg.norm(obs[:, :2] - self.goals, axis=-1) <= GOAL_RADIUS).astype(np.float64)
        return obs, rewards


def goal_states(goals: np.ndarray) -> np.ndarray:
    """Goal positions ``[..., 2]`` as goal states ``[..., 4]``: at the position, at rest."""
    goals = np.asarray(goals, np.float64)
    return np.concatenate([goals, np.zeros_like(goals)], -1)


def evaluate(policy: Callable[[np.ndarray, np.ndarray], np.ndarray], layout: str | Layout, mode: str = "single",
             episodes: int = 100, seed: int = 0, keep_trajectories: int = 0) -> dict:
    """Run ``episodes`` episodes at once for the layout's time limit; ``policy(observations [N, 4], goal
    states [N, 4]) -> actions [N, 2]``. Returns returns, normalised scores (per episode and their mean),
    the goals, the fraction of episodes within the goal's radius at their last step (``at_goal_at_end``: arrived
    and stayed) and, for the first ``keep_trajectories`` episodes, their positions ``[T + 1, 2]``."""
    layout = get_layout(layout)
    start_episodes(policy)
    env = Maze2D(layout, episodes)
    obs = env.reset(seed=seed, mode=mode)
    goal = goal_states(env.goals)
    returns = np.zeros(episodes)
    path = [obs[:keep_trajectories, :2]]
    for _ in range(layout.episode_length):
        obs, rewards = env.step(np.asarray(policy(obs, goal)))
        returns += rewards
        path.append(obs[:keep_trajectories, :2])
    scores = normalized_score(layout, returns)
    at_goal = np.linalg.norm(obs[:, :2] - env.goals, axis=-1) <= GOAL_RADIUS
    return dict(returns=returns, scores=scores, score=float(scores.mean()), goals=env.goals,
                at_goal_at_end=float(at_goal.mean()), trajectories=np.stack(path, 1))


# ------------------------------------------------------------------------------------ datasets


def check_action_noise(action_noise) -> float:
    if isinstance(action_noise, bool) or not isinstance(action_noise, (int, float, np.floating, np.integer)) \
            or not np.isfinite(action_noise) or action_noise < 0:
        raise ValueError(f"action_noise must be a finite standard deviation >= 0, got {action_noise!r}")
    return float(action_noise)


def generate(layout: str | Layout, size: int | None = None, seed: int = 0, progress: bool = True,
             action_noise: float = ACTION_NOISE) -> dict:
    """D4RL's procedure (module docstring): ``size`` transitions of one controller-driven trajectory whose
    actions are the controller's plus N(0, ``action_noise``^2), clipped to [-1, 1] (D4RL's ``--noisy``).

    Returns flat arrays in D4RL's coordinates: observations / next_observations ``[N, 4]``, actions
    ``[N, 2]``, targets ``[N, 2]`` (the controller's goal), rewards ``[N]`` (D4RL's sparse reward of the
    next observation) and ``segment_end [N]`` (True at the last transition of each segment)."""
    from tqdm.auto import tqdm

    layout = get_layout(layout)
    size = layout.dataset_size if size is None else size
    if not isinstance(size, (int, np.integer)) or size < 2:
        raise ValueError(f"size must be an int >= 2 (transitions), got {size!r}")
    action_noise = check_action_noise(action_noise)
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng([seed, 1])  # its own stream: the targets do not depend on the noise level
    env = Maze2D(layout, 1)
    controller = WaypointController(layout, rng)
    obs = np.empty((size + 1, 4))
    actions, targets = np.empty((size, 2)), np.empty((size, 2))
    ends = np.zeros(size, bool)
    obs[0] = env.reset(seed=int(rng.integers(2**31)))[0]
    target = env._random_positions(rng, 1)[0]
    steps_in_segment = 0
    with tqdm(total=size, desc=f"maze2d-{layout.name} dataset", unit="step", disable=not progress,
              mininterval=1.0) as bar:
        for n in range(size):
            action, solved = controller.action(obs[n, :2], obs[n, 2:], tuple(cell_of(target)))
            if action_noise:
                action = np.clip(action + action_noise * noise_rng.standard_normal(2), -1.0, 1.0)
            steps_in_segment += 1
            actions[n], targets[n] = action, target
            ends[n] = solved or steps_in_segment >= layout.episode_length
            obs[n + 1] = env.step(action[None])[0][0]  # (its reward is towards env.goals; ours is computed below)
            if ends[n]:
                target, steps_in_segment = env._random_positions(rng, 1)[0], 0
            if n % 10_000 == 9_999:
                bar.update(10_000)
        bar.update(size - bar.n)
    ends[-1] = True
    rewards = (np.linalg.norm(obs[1:, :2] - targets, axis=-1) <= GOAL_RADIUS).astype(np.float64)
    return dict(observations=obs[:-1], next_observations=obs[1:], actions=actions, targets=targets,
                rewards=rewards, segment_end=ends)


def default_root() -> Path:
    """Where generated datasets are cached: ``$PLATONIC_RL_DATA/maze2d`` or ``~/.cache/platonic_rl/maze2d``."""
    base = os.environ.get("PLATONIC_RL_DATA")
    return Path(base) / "maze2d" if base else Path.home() / ".cache" / "platonic_rl" / "maze2d"


def dataset_id(layout: str | Layout, size: int, seed: int, action_noise: float = ACTION_NOISE) -> str:
    """The Minari id of a generated dataset; the action noise is part of it (``noise0p5`` for 0.5, ``noise0`` for
    the noise-free controller: Minari ids take no dots), and ``v1`` marks the generator that adds it (``v0``
    datasets had no noise)."""
    noise = f"{check_action_noise(action_noise):g}".replace(".", "p")
    return f"platonic-rl/maze2d-{get_layout(layout).name}-{size}-noise{noise}-seed{seed}-v1"


@contextlib.contextmanager
def _minari_root(root: Path):
    previous = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        yield
    finally:
        if previous is None:
            del os.environ["MINARI_DATASETS_PATH"]
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def write_minari(data: dict, layout: str | Layout, root: str | os.PathLike, dataset_id_: str,
                 description: str = "") -> Path:
    """Write a :func:`generate` result as a Minari dataset ``root/<dataset_id_>`` (one episode per segment,
    observations in PointMaze's coordinates, as the official ``D4RL/pointmaze`` datasets). Returns its path."""
    import gymnasium as gym
    import gymnasium_robotics
    import minari
    from minari.data_collector import EpisodeBuffer

    layout = get_layout(layout)
    gym.register_envs(gymnasium_robotics)
    ends = np.flatnonzero(data["segment_end"])
    starts = np.concatenate([[0], ends[:-1] + 1])
    obs = from_d4rl(layout, np.concatenate([data["observations"], data["next_observations"][-1:]]))
    targets = from_d4rl(layout, data["targets"])
    actions = action_from_d4rl(data["actions"]).astype(np.float32)
    buffers = []
    for k, (s, e) in enumerate(zip(starts, ends)):
        steps = e - s + 1
        desired = np.concatenate([targets[s:e + 1], targets[e:e + 1]])
        buffers.append(EpisodeBuffer(
            id=k, observations=dict(observation=obs[s:e + 2], achieved_goal=obs[s:e + 2, :2], desired_goal=desired),
            actions=actions[s:e + 1], rewards=list(data["rewards"][s:e + 1]),
            terminations=[False] * steps, truncations=[False] * (steps - 1) + [True]))
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    # Minari makes the env once more from its spec (for the dataset's metadata): in a private temporary directory too.
    with _minari_root(root), warnings.catch_warnings(), private_temporary_directory(prefix="platonic_rl_pointmaze_"):
        warnings.filterwarnings("ignore", message=".*(code_permalink|author|author_email|eval_env)` is set to None")
        env = make_pointmaze(layout.gym_id, continuing_task=True, reset_target=True)
        minari.create_dataset_from_buffers(
            dataset_id_, buffers, env=env, algorithm_name="D4RL maze2d waypoint controller (platonic_rl.envs.maze2d)",
            description=description or f"D4RL-procedure maze2d-{layout.name} dataset, {len(data['actions'])} steps",
            ref_min_score=layout.ref_min_score, ref_max_score=layout.ref_max_score, data_format="hdf5")
    return root / dataset_id_


def make_dataset(layout: str | Layout, size: int | None = None, seed: int = 0, root: str | os.PathLike | None = None,
                 progress: bool = True, action_noise: float = ACTION_NOISE) -> Path:
    """The Minari dataset of (layout, size, seed, action_noise), generated on first use (:func:`generate` then
    :func:`write_minari`) and read from ``root`` (default :func:`default_root`) afterwards. Returns its path."""
    layout = get_layout(layout)
    size = layout.dataset_size if size is None else size
    action_noise = check_action_noise(action_noise)
    root = Path(root) if root is not None else default_root()
    name = dataset_id(layout, size, seed, action_noise)
    path = root / name
    if (path / "data" / "metadata.json").is_file():
        return path
    start = time.time()
    data = generate(layout, size, seed, progress, action_noise)
    seconds = time.time() - start
    write_minari(data, layout, root, name,
                 description=f"D4RL-procedure maze2d-{layout.name}, {size} steps, seed {seed}, action noise "
                             f"N(0, {action_noise:g}^2) before clipping; generated in {seconds:.0f} s")
    info = dict(layout=layout.name, transitions=int(size), episodes=int(data["segment_end"].sum()), seed=seed,
                action_noise=action_noise, generation_seconds=round(seconds, 1),
                write_seconds=round(time.time() - start - seconds, 1))
    (path / "generation.json").write_text(json.dumps(info, indent=1))
    return path


def dataset_info(path: str | os.PathLike) -> dict:
    """What :func:`make_dataset` recorded about a generated dataset (sizes, seconds), or ``{}``."""
    info = Path(path) / "generation.json"
    return json.loads(info.read_text()) if info.is_file() else {}


def load_dataset(source: str | os.PathLike, layout: str | Layout) -> dict[str, np.ndarray]:
    """An offline maze2d dataset as flat arrays in D4RL's coordinates: observations, actions,
    next_observations ``[N, 4]`` / ``[N, 2]``, rewards ``[N]`` and segment_end ``[N]`` (True at each
    episode's last transition).

    ``source``: a Minari dataset directory (ours from :func:`make_dataset`, or e.g. a local copy of
    ``D4RL/pointmaze/medium-v2``), the id of a Minari dataset in the local Minari root (never downloaded),
    or a D4RL ``maze2d-*.hdf5`` file. Minari datasets must be PointMaze datasets of ``layout``'s maze."""
    layout = get_layout(layout)
    path = Path(source)
    if path.is_file() and path.suffix in (".hdf5", ".h5"):
        return _load_d4rl_hdf5(path, layout)
    import minari

    if (path / "data" / "metadata.json").is_file():
        dataset = minari.MinariDataset(path / "data")
    elif (path / "metadata.json").is_file():
        dataset = minari.MinariDataset(path)
    elif not path.exists() and "/" in str(source) and not str(source).startswith((".", "/")):
        try:
            dataset = minari.load_dataset(str(source), download=False)
        except Exception as error:  # minari raises several types for a missing local dataset
            raise ValueError(f"source {str(source)!r} is neither a path nor a Minari dataset id in the local Minari "
                             f"root ({error}); nothing is downloaded") from None
    else:
        raise ValueError(f"source {str(source)!r} is not a Minari dataset (a directory with data/metadata.json) "
                         f"nor a D4RL .hdf5 file")
    spec = dataset.spec.env_spec
    maze_map = (spec.kwargs or {}).get("maze_map") if spec is not None else None
    if maze_map is not None and not np.array_equal(np.asarray(maze_map) == 1, layout.walls):
        raise ValueError(f"source {str(source)!r} holds a dataset of another maze than layout {layout.name!r} "
                         f"({spec.id})")
    obs, actions, next_obs, rewards, ends = [], [], [], [], []
    for episode in dataset.iterate_episodes():
        o = episode.observations
        o = o["observation"] if isinstance(o, dict) else o
        o = np.asarray(o, np.float64)
        if o.ndim != 2 or o.shape[1] != 4:
            raise ValueError(f"source {str(source)!r}: expected PointMaze observations [T + 1, 4], got {o.shape}")
        states = to_d4rl(layout, o)
        obs.append(states[:-1])
        next_obs.append(states[1:])
        actions.append(action_to_d4rl(np.asarray(episode.actions, np.float64)))
        rewards.append(np.asarray(episode.rewards, np.float64))
        end = np.zeros(len(episode.actions), bool)
        end[-1] = True
        ends.append(end)
    return dict(observations=np.concatenate(obs), actions=np.concatenate(actions),
                next_observations=np.concatenate(next_obs), rewards=np.concatenate(rewards),
                segment_end=np.concatenate(ends))


def _load_d4rl_hdf5(path: Path, layout: Layout) -> dict[str, np.ndarray]:
    """D4RL's maze2d file: consecutive rows are consecutive steps; segments end where ``infos/goal`` changes
    (or at ``timeouts``); the last row of each segment has no next observation and is dropped."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"source {str(path)!r} is not an HDF5 file (a D4RL maze2d file was expected): {error}") from None
    with f:
        missing = [k for k in ("observations", "actions", "infos/goal") if k not in f]
        if missing:
            raise ValueError(f"source {str(path)!r} is not a D4RL maze2d file: it lacks {missing}")
        obs, actions, goal = (np.asarray(f[k], np.float64) for k in ("observations", "actions", "infos/goal"))
        timeouts = np.asarray(f["timeouts"], bool) if "timeouts" in f else np.zeros(len(obs), bool)
    if obs.ndim != 2 or obs.shape[1] != 4:
        raise ValueError(f"source {str(path)!r}: observations must be [N, 4] (maze2d), got {obs.shape}")
    new_segment = np.zeros(len(obs), bool)
    new_segment[1:] = np.any(goal[1:] != goal[:-1], -1) | timeouts[:-1]
    valid = ~new_segment[1:]                   # transition t (row t -> row t + 1) stays in one segment
    last = np.append(new_segment[2:], True)    # ... and is its segment's last one
    next_obs = obs[1:][valid]
    rewards = (np.linalg.norm(next_obs[:, :2] - goal[:-1][valid], axis=-1) <= GOAL_RADIUS).astype(np.float64)
    return dict(observations=obs[:-1][valid], actions=actions[:-1][valid], next_observations=next_obs,
                rewards=rewards, segment_end=last[valid])


# ------------------------------------------------------------------- prepared files (NumPy only)


def prepare_dataset(path: str | Path, layout: str, size: int | None = None, seed: int = 0) -> dict:
    """Generate a dataset with :func:`generate` (MuJoCo; action noise N(0, 0.5^2)) and save it as one
    ``.npz`` that needs only NumPy to read (:func:`load_prepared`; the QRL slice carries it to accelerator machines): the trajectory's states ``[N + 1, 4]`` (float32, D4RL's coordinates), actions ``[N, 2]`` and
    segment_end ``[N]``, with its layout, size, seed and action noise. Returns that description."""
    start = time.time()
    data = generate(layout, size, seed, progress=True)
    states = np.concatenate([data["observations"], data["next_observations"][-1:]]).astype(np.float32)
    info = dict(layout=get_layout(layout).name, transitions=len(data["actions"]), seed=seed,
                action_noise=ACTION_NOISE, episodes=int(data["segment_end"].sum()),
                generation_seconds=round(time.time() - start, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, states=states, actions=data["actions"].astype(np.float32),
                        segment_end=data["segment_end"], info=json.dumps(info))
    return info


def load_prepared(path: str | Path, layout: str) -> tuple[dict, dict]:
    """A :func:`prepare_dataset` file as (flat arrays in D4RL's coordinates, its description); refused if it
    holds another layout."""
    with np.load(path) as f:
        missing = {"states", "actions", "segment_end", "info"} - set(f.files)
        if missing:
            raise ValueError(f"path {str(path)!r} is not a prepared maze2d file: it lacks {sorted(missing)}")
        info = json.loads(str(f["info"]))
        states, actions, ends = f["states"], f["actions"], f["segment_end"].astype(bool)
        next_states = f["next_states"] if "next_states" in f.files else None
    if info["layout"] != get_layout(layout).name:
        raise ValueError(f"path {str(path)!r} holds maze2d-{info['layout']}, not layout {layout!r}")
    if next_states is not None:  # several trajectories (save_prepared_transitions): each row's own next state
        if not len(states) == len(next_states) == len(actions) == len(ends):
            raise ValueError(f"path {str(path)!r}: states, next_states, actions and segment_end must have as "
                             "many rows")
        return dict(observations=states, next_observations=next_states, actions=actions, segment_end=ends), info
    if len(states) != len(actions) + 1 or len(ends) != len(actions):
        raise ValueError(f"path {str(path)!r}: states must have one row more than actions and segment_end")
    return dict(observations=states[:-1], next_observations=states[1:], actions=actions, segment_end=ends), info


def save_prepared_transitions(path: str | Path, data: dict, info: dict) -> None:
    """Flat transitions of several trajectories (as :func:`platonic_rl.envs.maze2d_jax_data.generate` returns) as a
    file :func:`load_prepared` reads: states and next_states ``[N, 4]``, actions, segment_end and ``info`` (which
    must name the layout and count the episodes)."""
    missing = {"layout", "episodes", "action_noise"} - set(info)
    if missing:
        raise ValueError(f"save_prepared_transitions: info lacks {sorted(missing)}")
    if not str(path).endswith(".npz"):
        raise ValueError(f"save_prepared_transitions: path must end in .npz, got {str(path)!r}")
    ends = np.asarray(data["segment_end"], bool)
    if info["episodes"] != int(ends.sum()) or not ends[-1]:
        raise ValueError(f"save_prepared_transitions: info['episodes']={info['episodes']} but segment_end marks "
                         f"{int(ends.sum())} segment ends (and must mark the last row)")
    inside = ~ends[:-1]  # within a segment, a transition's next state is the following transition's state
    if not np.array_equal(data["next_observations"][:-1][inside], data["observations"][1:][inside]):
        raise ValueError("save_prepared_transitions: within a segment, next_observations[i] must equal "
                         "observations[i + 1]")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, states=data["observations"].astype(np.float32),
             next_states=data["next_observations"].astype(np.float32), actions=data["actions"].astype(np.float32),
             segment_end=data["segment_end"], info=json.dumps(info))
