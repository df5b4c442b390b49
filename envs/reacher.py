"""A planar two-link arm reaching for goals with its fingertip, in pure JAX (a functional goal env).

    env = Reacher()                      # see platonic_rl.envs.jax_env for the interface

The arm of gymnasium's / dm_control's reacher (two links in a plane, 0.1 and 0.11 long, the shoulder at the
origin, torque-controlled joints), written out as rigid-body dynamics so that it steps at the speed of a few
array operations on any device (the spirit of JaxGCRL's reacher; MJX is not needed for two hinges):

* masses :data:`LINK_MASS` at the link ends, joint armature :data:`ARMATURE`, viscous joint damping
  :data:`DAMPING`; ``M(q) qdd + c(q, qd) + b qd = tau`` with the standard two-link mass matrix and Coriolis
  terms, torques ``tau = GEAR * action``;
* semi-implicit Euler with :data:`SUBSTEPS` substeps of :data:`TIMESTEP` per env step (0.02 s), joint speeds
  clipped to +-:data:`MAX_SPEED`.

Observation ``[cos q1, sin q1, cos q2, sin q2, qd1 / 10, qd2 / 10, x, y]`` with ``(x, y)`` the fingertip. A
reset draws both joint angles uniformly (at rest) and a target as the fingertip of another uniformly random
configuration (always reachable). The goal is reached when the fingertip is within :data:`GOAL_RADIUS` of the
target (0.05, dm_control's reacher-easy target and JaxGCRL's reacher threshold); episodes are 50 steps (1 s).

What the agent is shown as its goal state (``goal``):

* ``"pose"`` (default): the observation of that random configuration at rest, ``[cos, sin, cos, sin, 0, 0, x, y]``
  with ``goal_dims = (0, 1, 2, 3, 6, 7)``: a state the arm can be in, as every hindsight goal (a reached state
  masked to the goal dimensions) also is. Quasimetric value learning needs this: its constraint acts on
  transitions between states, so nothing bounds the distance to a goal vector that is no state.
* ``"fingertip"``: JaxGCRL's goal, only ``(x, y)`` (``goal_dims = (6, 7)``; the joint entries zero). Such goal
  states match no configuration of the arm; QRL's learned distances to them grow without bound
  (``docs/results/device_loop_reacher_checks``).

Success is the same for both: the fingertip within the radius, in either elbow configuration.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from platonic_rl.envs.jax_env import GoalEnv

LINK_LENGTHS = (0.1, 0.11)
LINK_MASS = 0.05
ARMATURE = 0.002
DAMPING = 0.02
GEAR = 0.1
TIMESTEP = 0.005
SUBSTEPS = 4
MAX_SPEED = 30.0
GOAL_RADIUS = 0.05


def fingertip(q: jax.Array) -> jax.Array:
    """The fingertip ``[..., 2]`` of joint angles ``q [..., 2]``."""
    l1, l2 = LINK_LENGTHS
    a1, a12 = q[..., 0], q[..., 0] + q[..., 1]
    return jnp.stack([l1 * jnp.cos(a1) + l2 * jnp.cos(a12), l1 * jnp.sin(a1) + l2 * jnp.sin(a12)], -1)


def joint_accelerations(q: jax.Array, qd: jax.Array, torque: jax.Array) -> jax.Array:
    """``qdd = M(q)^-1 (tau - c(q, qd) - b qd)`` for point masses at the link ends."""
    l1, l2 = LINK_LENGTHS
    m = LINK_MASS
    cos2, sin2 = jnp.cos(q[1]), jnp.sin(q[1])
    m11 = ARMATURE + m * l1 ** 2 + m * (l1 ** 2 + l2 ** 2 + 2 * l1 * l2 * cos2)
    m12 = m * (l2 ** 2 + l1 * l2 * cos2)
    m22 = ARMATURE + m * l2 ** 2
    h = m * l1 * l2 * sin2
    coriolis = jnp.stack([-h * (2 * qd[0] * qd[1] + qd[1] ** 2), h * qd[0] ** 2])
    rhs = torque - coriolis - DAMPING * qd
    det = m11 * m22 - m12 ** 2
    return jnp.stack([m22 * rhs[0] - m12 * rhs[1], m11 * rhs[1] - m12 * rhs[0]]) / det


GOALS = ("pose", "fingertip")


@dataclasses.dataclass(frozen=True)
class Reacher(GoalEnv):
    episode_length: int = 50
    goal: str = "pose"  # one of GOALS: what the goal state shows (the module docstring)

    obs_dim = 8
    action_dim = 2

    def __post_init__(self):
        if not isinstance(self.episode_length, int) or self.episode_length < 1:
            raise ValueError(f"Reacher: episode_length must be a positive int, got {self.episode_length!r}")
        if self.goal not in GOALS:
            raise ValueError(f"Reacher: goal must be one of {GOALS}, got {self.goal!r}")

    @property
    def goal_dims(self) -> tuple[int, ...]:
        return (0, 1, 2, 3, 6, 7) if self.goal == "pose" else (6, 7)

    def init(self, key):
        start_key, goal_key = jax.random.split(key)
        q = jax.random.uniform(start_key, (2,), minval=-jnp.pi, maxval=jnp.pi)
        goal_q = jax.random.uniform(goal_key, (2,), minval=-jnp.pi, maxval=jnp.pi)
        goal = self.observe(dict(q=goal_q, qd=jnp.zeros(2))) * jnp.asarray(self.goal_mask)
        return dict(q=q, qd=jnp.zeros(2)), goal

    def dynamics(self, physics, action):
        torque = GEAR * action

        def substep(_, state):
            q, qd = state
            qd = jnp.clip(qd + TIMESTEP * joint_accelerations(q, qd, torque), -MAX_SPEED, MAX_SPEED)
            return q + TIMESTEP * qd, qd

        q, qd = jax.lax.fori_loop(0, SUBSTEPS, substep, (physics["q"], physics["qd"]), unroll=True)
        return dict(q=jnp.arctan2(jnp.sin(q), jnp.cos(q)), qd=qd)

    def observe(self, physics):
        q, qd = physics["q"], physics["qd"]
        return jnp.concatenate([jnp.stack([jnp.cos(q[0]), jnp.sin(q[0]), jnp.cos(q[1]), jnp.sin(q[1])]),
                                qd / 10.0, fingertip(q)]).astype(jnp.float32)

    def reached(self, observation, goal):
        return jnp.sqrt(jnp.sum((observation[6:] - goal[6:]) ** 2)) <= GOAL_RADIUS
