"""D4RL's maze2d dataset procedure in pure JAX: many controller-driven trajectories at once, on any device.

    data = maze2d_jax_data.generate("medium", trajectories=1000, steps=2000, key=jax.random.PRNGKey(0))
    # flat arrays as envs.maze2d.generate returns: observations, next_observations, actions, targets,
    # rewards, segment_end -- here 2M transitions made in one compiled scan

The same procedure as :func:`platonic_rl.envs.maze2d.generate` (D4RL's generation script with its ``--noisy``
action noise), written as a ``lax.scan`` over steps of ``trajectories`` point masses vmapped together, in the
pure-JAX point maze (:class:`~platonic_rl.envs.point_maze.PointMaze`, whose step equals MuJoCo's away from walls):

* each trajectory starts at a uniformly random free cell + U(-0.1, 0.1) with velocity N(0, 0.1^2) and heads for a
  target, a random free cell + U(-0.1, 0.1);
* :class:`~platonic_rl.envs.maze2d.WaypointController`'s rule: when the target's cell changes, plan the cells of a
  shortest path from the current cell (the same tie-breaking), each waypoint its cell's point minus U(0, 0.2) per
  coordinate (the target cell's exact); act ``clip(10 (waypoint - position) - velocity, -1, 1)``; pass a waypoint
  within 0.1 while moving less than 0.1 per step; solved within 0.1 of the target cell's point, likewise;
* the executed and recorded action is that plus N(0, ``action_noise``^2), clipped to [-1, 1];
* a segment (an episode of the dataset) ends when solved or after the layout's time limit, and a new target is
  drawn.

Where it differs: D4RL records one long trajectory, this ``trajectories`` parallel ones (each one's last
transition also ends a segment), and contacts with walls follow the JAX point maze's hard contacts. Its
statistics match the MuJoCo generator's within sampling error (``tests/test_maze2d_jax_data.py``: segments per
step, saturated actions, the targets' spread). It needs only JAX and NumPy, so an accelerator machine with no
MuJoCo and no network can make the maze2d data itself.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.envs import maze2d
from platonic_rl.envs.point_maze import PointMaze

SOLVE_THRESHOLD = 0.1  # the controller's (D4RL's) threshold for a passed waypoint and a solved target
P_GAIN, D_GAIN = 10.0, -1.0


def next_cell_table(layout: str | maze2d.Layout) -> np.ndarray:
    """``[n, n]`` int: for free cells a (row) and target b (column), the index of the next free cell on a shortest
    path from a to b (b itself when a == b), with :func:`~platonic_rl.envs.maze2d.shortest_path`'s tie-breaking
    (the first neighbour, in the order up, down, left, right, of least distance). Indices into ``free_cells``."""
    layout = maze2d.get_layout(layout)
    free = layout.free_cells
    index = {tuple(c): i for i, c in enumerate(free)}
    table = np.zeros((len(free), len(free)), np.int32)
    for b, target in enumerate(free):
        dist = maze2d.cell_distances(layout, tuple(target))
        for a, cell in enumerate(free):
            if a == b:
                table[a, b] = b
                continue
            step = min(((cell[0] + di, cell[1] + dj) for di, dj in maze2d.GRID_MOVES), key=lambda n: dist[n])
            table[a, b] = index[step]
    return table


@functools.lru_cache(maxsize=None)
def _tables(layout_name: str):
    layout = maze2d.get_layout(layout_name)
    free = layout.free_cells
    lookup = np.full(layout.shape, -1, np.int32)
    lookup[free[:, 0], free[:, 1]] = np.arange(len(free))
    return next_cell_table(layout), lookup, free.astype(np.float32)


def _plan(layout_name: str, position: jax.Array, target_index: jax.Array, key: jax.Array):
    """Waypoints ``[n, 2]`` along a shortest path from ``position``'s cell to the target cell (padded with the
    target), each minus U(0, 0.2) per coordinate except the target's, and the path's length (>= 1)."""
    table, lookup, free = (jnp.asarray(t) for t in _tables(layout_name))
    n = free.shape[0]
    cell = jnp.rint(position + maze2d.CELL_OFFSET).astype(jnp.int32)
    start = lookup[cell[0], cell[1]]

    def advance(current, _):
        following = table[current, target_index]
        return following, following

    _, path = jax.lax.scan(advance, start, None, length=n)
    length = jnp.maximum(jnp.sum(path != target_index) + 1, 1)  # cells up to and including the target
    noise = jax.random.uniform(key, (n, 2)) * 0.2
    waypoints = free[path] - jnp.where((path == target_index)[:, None], 0.0, noise)
    return waypoints, length


def generate(layout: str, trajectories: int, steps: int, key: jax.Array, action_noise: float = maze2d.ACTION_NOISE
             ) -> dict[str, np.ndarray]:
    """``trajectories`` x ``steps`` transitions of the procedure (module docstring), as flat NumPy arrays in D4RL's
    coordinates, trajectory after trajectory: observations / next_observations ``[N, 4]``, actions ``[N, 2]``,
    targets ``[N, 2]``, rewards ``[N]`` (the sparse reward of the next observation towards the target) and
    segment_end ``[N]`` (True at each segment's last transition and at each trajectory's end)."""
    layout_obj = maze2d.get_layout(layout)
    for name, value in (("trajectories", trajectories), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    action_noise = maze2d.check_action_noise(action_noise)
    # The noise scale is traced, not static: noisy and noise-free data share one compiled program.
    out = jax.jit(_generate, static_argnums=(0, 1, 2))(layout_obj.name, int(trajectories), int(steps), key,
                                                         jnp.float32(action_noise))
    out = jax.tree.map(np.asarray, out)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in out.items()}
    flat["segment_end"] = flat["segment_end"].copy()
    flat["segment_end"][steps - 1::steps] = True
    flat["rewards"] = (np.linalg.norm(flat["next_observations"][:, :2] - flat["targets"], axis=-1)
                       <= maze2d.GOAL_RADIUS).astype(np.float32)
    return flat


def _generate(layout: str, trajectories: int, steps: int, key: jax.Array, action_noise: jax.Array) -> dict:
    env = PointMaze(layout)
    _, _, free = _tables(layout)
    free = jnp.asarray(free)
    time_limit = maze2d.get_layout(layout).episode_length

    def random_target(k):
        index_key, jitter_key = jax.random.split(k)
        index = jax.random.randint(index_key, (), 0, free.shape[0])
        return index, free[index] + jax.random.uniform(jitter_key, (2,), minval=-0.1, maxval=0.1)

    def start(k):
        start_key, target_key = jax.random.split(k)
        physics, _ = env.init(start_key)
        index, target = random_target(target_key)
        n = free.shape[0]
        return dict(physics=physics, target_index=index, target=target, planned_index=jnp.int32(-1),
                    waypoints=jnp.zeros((n, 2)), length=jnp.int32(1), waypoint=jnp.int32(0),
                    previous=physics["position"], segment_steps=jnp.int32(0))

    def step(state, k):
        plan_key, noise_key, target_key = jax.random.split(k, 3)
        position, velocity = state["physics"]["position"], state["physics"]["velocity"]
        replan = state["target_index"] != state["planned_index"]
        waypoints, length = _plan(layout, position, state["target_index"], plan_key)
        waypoints = jnp.where(replan, waypoints, state["waypoints"])
        length = jnp.where(replan, length, state["length"])
        index = jnp.where(replan, 0, state["waypoint"])
        previous = jnp.where(replan, position, state["previous"])
        goal = free[state["target_index"]]
        moved = jnp.linalg.norm(previous - position)
        solved = (jnp.linalg.norm(position - goal) < SOLVE_THRESHOLD) & (moved < 0.1)
        waypoint = jnp.where(solved, goal, waypoints[index])
        action = jnp.clip(P_GAIN * (waypoint - position) + D_GAIN * velocity, -1.0, 1.0)
        passed = ~solved & (jnp.linalg.norm(position - waypoint) < SOLVE_THRESHOLD) & (moved < 0.1)
        index = jnp.where(passed, jnp.minimum(index + 1, length - 1), index)
        action = jnp.clip(action + action_noise * jax.random.normal(noise_key, (2,)), -1.0, 1.0)
        segment_steps = state["segment_steps"] + 1
        end = solved | (segment_steps >= time_limit)
        physics = env.dynamics(state["physics"], action)
        new_index, new_target = random_target(target_key)
        record = dict(observations=env.observe(state["physics"]), actions=action, targets=state["target"],
                      next_observations=env.observe(physics), segment_end=end)
        state = dict(physics=physics, target_index=jnp.where(end, new_index, state["target_index"]),
                     target=jnp.where(end, new_target, state["target"]), planned_index=state["target_index"],
                     waypoints=waypoints, length=length, waypoint=index, previous=position,
                     segment_steps=jnp.where(end, 0, segment_steps))
        return state, record

    def trajectory(k):
        start_key, steps_key = jax.random.split(k)
        _, records = jax.lax.scan(step, start(start_key), jax.random.split(steps_key, steps))
        return records

    return jax.vmap(trajectory)(jax.random.split(key, trajectories))
