"""Point-maze navigation on the maze2d layouts (umaze, medium, large) as a functional JAX goal env.

    env = PointMaze("medium")                  # backend="jax" (default) or "mjx"
    state = jax.vmap(env.reset)(keys)          # see platonic_rl.envs.jax_env

Everything observable follows :mod:`platonic_rl.envs.maze2d` (D4RL's conventions): observations
``[x, y, vx, vy]`` in D4RL's coordinates, actions in [-1, 1]^2 along D4RL's axes, the goal reached within 0.5
(reward 1 there), episodes of the layout's D4RL time limit (300 / 600 / 800 steps) unless ``episode_length``
is given. Starts are a uniformly random free cell + U(-0.1, 0.1) with velocity N(0, 0.1^2); goals
(``goals="multi"``) a uniformly random free cell *other than the start's* + U(-0.1, 0.1), or D4RL's fixed goal
(``goals="single"``). Goal states are ``[gx, gy, 0, 0]`` (``goal_dims = (0, 1)``).

Two backends with one interface:

* ``"jax"`` (default, fast everywhere): the point mass of gymnasium-robotics' PointMaze model written out --
  velocity clipped to +-5, then MuJoCo's Euler step with implicit damping, ``v' = (m v + h 100 a) / (m + h)``,
  ``p' = p + h v'`` (m = 4.18879, h = 0.01; equal to ``mj_step`` to 1e-9 away from walls) -- and walls as
  hard contacts: the ball (radius 0.1, + the model's contact margin 0.002) is pushed out of every wall cell it overlaps, the velocity into the
  wall is removed, and Coulomb friction (mu = 0.5, the model's) takes at most mu times that from the sliding
  velocity. MuJoCo's contacts are soft (they let the ball sink in and spring back a little), so trajectories
  that touch walls differ slightly: ``tests/test_point_maze.py`` measures it.
* ``"mjx"``: MuJoCo XLA stepping the very MJCF model gymnasium-robotics builds (the one
  :class:`~platonic_rl.envs.maze2d.Maze2D` steps with C MuJoCo), the backend for accelerators. On CPU it is
  much slower than the ``"jax"`` backend (it evaluates every wall's contact each step).
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.envs import maze2d
from platonic_rl.envs.jax_env import GoalEnv, rollout

MASS = 4.0 / 3.0 * np.pi * 0.1 ** 3 * 1000.0  # the ball: radius 0.1, density 1000
DAMPING = 1.0
GEAR = 100.0
TIMESTEP = 0.01
RADIUS = 0.1
MARGIN = 0.002  # the model's contact margin: MuJoCo's contact force starts at RADIUS + MARGIN
FRICTION = 0.5
BACKENDS = ("jax", "mjx")
# Edge neighbours first, then diagonal ones: a ball in a concave corner is pushed out of both walls before a
# diagonal cell's corner is considered.
_NEIGHBOURS = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


@functools.lru_cache(maxsize=None)
def _mjx_model(layout: str):
    """The gymnasium-robotics MuJoCo model of ``layout``, on the device for MJX. Cached, so it is built eagerly
    even when first asked for inside a trace (a traced model would leak out of that trace through the cache)."""
    from mujoco import mjx

    with jax.ensure_compile_time_eval():
        return mjx.put_model(maze2d.Maze2D(layout, 1).model)


def collide(walls: jax.Array, position: jax.Array, velocity: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Push a ball of :data:`RADIUS` (+ :data:`MARGIN`) at ``position`` (D4RL coordinates) out of the wall cells around it; remove
    the velocity into each wall it touched, and up to :data:`FRICTION` times that from the sliding velocity."""
    cell = jnp.rint(position + maze2d.CELL_OFFSET).astype(jnp.int32)
    for di, dj in _NEIGHBOURS:
        c = cell + jnp.array([di, dj])
        inside = jnp.all((c >= 0) & (c < jnp.array(walls.shape)))
        wall = inside & walls[jnp.clip(c[0], 0, walls.shape[0] - 1), jnp.clip(c[1], 0, walls.shape[1] - 1)]
        low = c - 0.5 - maze2d.CELL_OFFSET
        closest = jnp.clip(position, low, low + 1.0)
        offset = position - closest
        distance = jnp.sqrt(jnp.sum(offset ** 2))
        touching = wall & (distance < RADIUS + MARGIN)
        normal = offset / jnp.maximum(distance, 1e-9)
        position = jnp.where(touching, closest + normal * (RADIUS + MARGIN), position)
        into = jnp.minimum(velocity @ normal, 0.0)  # <= 0: the speed towards the wall
        tangent = velocity - (velocity @ normal) * normal
        speed = jnp.sqrt(jnp.sum(tangent ** 2))
        slowed = tangent * jnp.maximum(1.0 - FRICTION * (-into) / jnp.maximum(speed, 1e-9), 0.0)
        velocity = jnp.where(touching & (into < 0), velocity - tangent + slowed - into * normal, velocity)
    return position, velocity


@dataclasses.dataclass(frozen=True)
class PointMaze(GoalEnv):
    layout: str = "umaze"
    backend: str = "jax"
    goals: str = "multi"
    episode_length: int = 0  # 0: the layout's D4RL time limit

    obs_dim = 4
    action_dim = 2
    goal_dims = (0, 1)

    def __post_init__(self):
        maze2d.get_layout(self.layout)
        if self.backend not in BACKENDS:
            raise ValueError(f"PointMaze: backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.goals not in ("multi", "single"):
            raise ValueError(f"PointMaze: goals must be 'multi' or 'single', got {self.goals!r}")
        if not isinstance(self.episode_length, int) or self.episode_length < 0:
            raise ValueError(f"PointMaze: episode_length must be an int >= 1 (0: the layout's limit), got "
                             f"{self.episode_length!r}")
        if self.episode_length == 0:
            object.__setattr__(self, "episode_length", maze2d.get_layout(self.layout).episode_length)

    @property
    def maze(self) -> maze2d.Layout:
        return maze2d.get_layout(self.layout)

    def init(self, key):
        maze = self.maze
        free = jnp.asarray(maze.free_cells, jnp.float32)
        start_key, jitter_key, velocity_key, goal_key, goal_jitter_key = jax.random.split(key, 5)
        start_index = jax.random.randint(start_key, (), 0, len(free))
        position = free[start_index] + jax.random.uniform(jitter_key, (2,), minval=-0.1, maxval=0.1)
        velocity = 0.1 * jax.random.normal(velocity_key, (2,))
        if self.goals == "single":
            goal = jnp.asarray(maze.goal, jnp.float32)
        else:  # another free cell, uniformly
            other = (start_index + jax.random.randint(goal_key, (), 1, len(free))) % len(free)
            goal = free[other] + jax.random.uniform(goal_jitter_key, (2,), minval=-0.1, maxval=0.1)
        goal_state = jnp.concatenate([goal, jnp.zeros(2)])
        if self.backend == "jax":
            return dict(position=position, velocity=velocity), goal_state
        from mujoco import mjx

        model = _mjx_model(self.layout)
        qstate = maze2d.from_d4rl(maze, jnp.concatenate([position, velocity]), xp=jnp)
        return mjx.make_data(model).replace(qpos=qstate[:2], qvel=qstate[2:]), goal_state

    def dynamics(self, physics, action):
        if self.backend == "jax":
            velocity = jnp.clip(physics["velocity"], -maze2d.MAX_VELOCITY, maze2d.MAX_VELOCITY)
            velocity = (MASS * velocity + TIMESTEP * GEAR * action) / (MASS + TIMESTEP * DAMPING)
            position = physics["position"] + TIMESTEP * velocity
            position, velocity = collide(jnp.asarray(self.maze.walls), position, velocity)
            return dict(position=position, velocity=velocity)
        from mujoco import mjx

        control = maze2d.action_from_d4rl(action, xp=jnp)
        data = physics.replace(qvel=jnp.clip(physics.qvel, -maze2d.MAX_VELOCITY, maze2d.MAX_VELOCITY), ctrl=control)
        return mjx.step(_mjx_model(self.layout), data)

    def observe(self, physics):
        if self.backend == "jax":
            return jnp.concatenate([physics["position"], physics["velocity"]]).astype(jnp.float32)
        return maze2d.to_d4rl(self.maze, jnp.concatenate([physics.qpos, physics.qvel]), xp=jnp).astype(jnp.float32)

    def reached(self, observation, goal):
        return jnp.sqrt(jnp.sum((observation[:2] - goal[:2]) ** 2)) <= maze2d.GOAL_RADIUS


def sparse_returns(env: PointMaze, act, key: jax.Array, episodes: int) -> jax.Array:
    """D4RL's return of each of ``episodes`` episodes of ``act(observations, goals, key) -> actions`` (pure JAX):
    the steps that end within :data:`~platonic_rl.envs.maze2d.GOAL_RADIUS` of the goal, as
    :func:`platonic_rl.envs.maze2d.evaluate` counts them in C MuJoCo; ``maze2d.normalized_score`` turns them into
    D4RL's normalised score. ``[episodes]``."""
    out = rollout(env, act, key, episodes)
    reached = jnp.linalg.norm(out["observations"][:, 1:, :2] - out["goals"][:, None, :2], axis=-1) <= maze2d.GOAL_RADIUS
    return reached.sum(1)
