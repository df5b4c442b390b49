"""Brax environments as the suite's goal envs, and the suite's goal envs as Brax environments.

    from brax import envs
    from platonic_rl.envs.brax_env import BraxGoalEnv, AsBraxEnv

    env = BraxGoalEnv(envs.get_environment("reacher"), goal_dims=(6, 7), sample_goal=..., observe_state=...,
                      goal_state=..., success_threshold=0.05, episode_length=50)     # a GoalEnv (envs.jax_env)
    brax_env = AsBraxEnv(PointMaze("umaze"))                                         # a brax.envs.Env

**Any** ``brax.envs.Env`` **as a goal env** (:class:`BraxGoalEnv`). Brax's ``reset(rng) -> State`` and
``step(State, action) -> State`` are pure JAX, so the wrapped env runs inside the device loop's ``lax.scan``,
vmapped over envs and seeds, with no host round-trip. The user says three things:

* **what the goal is**: ``goal_dims``, the observation entries a goal fixes, and ``sample_goal(key, brax_state)``,
  the goal values ``[len(goal_dims)]`` of an episode, drawn at reset (from the key, or read from Brax's state: the
  reacher's target is in its physics). ``observe_state(brax_state)`` chooses the observation (default: Brax's ``obs``);
  an observation that shows the goal itself (Brax's reacher shows its target) makes every state a different state
  per goal, so goal envs usually observe the body alone;
* **when it is reached**: ``success_threshold`` (the goal entries, or those named in ``success_dims``, within this
  Euclidean distance of the goal's) or
  ``success_key`` (an entry of Brax's ``State.metrics`` or ``State.info``, nonzero when reached), one of the two;
* **what the agent is shown as its goal state**: ``goal_state(brax_state, goal) -> [obs_dim]``, a state the body
  can be in whose goal entries are the goal (a resting pose reaching it, as :mod:`~platonic_rl.envs.reacher`'s
  ``"pose"`` goals), or ``None``: the goal entries alone, zeros elsewhere, with a warning. QRL's constraint acts on
  transitions between states, so nothing bounds its distance to a goal vector that is no state
  (``docs/results/device_loop_reacher_checks``).

Episodes run exactly ``episode_length`` steps (the suite's loops collect whole, equal episodes); Brax's own ``done``
does not end them, so build the env without early termination (e.g. ``terminate_when_unhealthy=False``). Actions are
clipped to [-1, 1], Brax's action range. The reward is the suite's sparse success reward.

**The suite's goal envs as Brax environments** (:class:`AsBraxEnv`): observation ``[observation, goal state]``,
reward the sparse success, ``metrics["success"]``, ``done`` always 0 (the episode's end is a time limit, which
Brax's training wrappers add with ``episode_length=env.episode_length`` and mark as truncation), and the goal env's
state as ``pipeline_state``. Brax's own training code (``brax.training.agents.sac``, PPO) then runs on them.

Brax is an optional dependency: ``pip install -e ".[brax]"``.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.envs.jax_env import GoalEnv, GoalEnvState

try:
    from brax.envs.base import Env as _BraxEnv
    from brax.envs.base import State as BraxState
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("platonic_rl.envs.brax_env needs Brax: pip install -e \".[brax]\"") from error


@dataclasses.dataclass(frozen=True, eq=False)
class BraxGoalEnv(GoalEnv):
    """A ``brax.envs.Env`` as a :class:`~platonic_rl.envs.jax_env.GoalEnv` (see the module docstring).

    ``physics`` of its states is ``{"brax": Brax's State, "goal": the goal values}``. Instances compare by identity
    (a Brax env has no value equality), so build one per env and reuse it: every new instance compiles anew."""

    env: Any
    goal_dims: tuple[int, ...]
    sample_goal: Callable[[jax.Array, Any], jax.Array]
    episode_length: int = 1000
    observe_state: Callable[[Any], jax.Array] | None = None
    goal_state: Callable[[Any, jax.Array], jax.Array] | None = None
    success_threshold: float | None = None
    success_key: str | None = None
    success_dims: tuple[int, ...] | None = None

    def __post_init__(self):
        for name in ("reset", "step", "action_size"):
            if not hasattr(self.env, name):
                raise TypeError(f"BraxGoalEnv: env must be a brax.envs.Env (reset, step, action_size), got "
                                f"{type(self.env).__name__} without {name!r}")
        if not callable(self.sample_goal):
            raise TypeError("BraxGoalEnv: sample_goal must be a function (key, brax_state) -> goal values")
        if isinstance(self.episode_length, bool) or not isinstance(self.episode_length, (int, np.integer)) \
                or self.episode_length < 1:
            raise ValueError(f"BraxGoalEnv: episode_length must be a positive int, got {self.episode_length!r}")
        object.__setattr__(self, "episode_length", int(self.episode_length))
        if (self.success_threshold is None) == (self.success_key is None):
            raise ValueError("BraxGoalEnv: give exactly one of success_threshold (a distance on the goal entries) "
                             f"and success_key (a State.metrics/info entry), got {self.success_threshold!r} and "
                             f"{self.success_key!r}")
        if self.success_threshold is not None and not self.success_threshold > 0:
            raise ValueError(f"BraxGoalEnv: success_threshold must be > 0, got {self.success_threshold!r}")
        dims = tuple(int(d) for d in self.goal_dims)
        object.__setattr__(self, "goal_dims", dims)
        key = jax.random.PRNGKey(0)
        start = jax.eval_shape(self.env.reset, key)
        observation = jax.eval_shape(self._observe, start)
        if observation.ndim != 1:
            raise ValueError(f"BraxGoalEnv: the observation must be a vector; observe gives shape {observation.shape}"
                             " (pass observe_state= to flatten a dict observation)")
        obs_dim = observation.shape[0]
        object.__setattr__(self, "obs_dim", obs_dim)
        object.__setattr__(self, "action_dim", int(self.env.action_size))
        if not dims or len(set(dims)) != len(dims) or min(dims) < 0 or max(dims) >= obs_dim:
            raise ValueError(f"BraxGoalEnv: goal_dims must be distinct indices into the {obs_dim}-dim observation, "
                             f"got {self.goal_dims!r}")
        if self.success_dims is not None:
            measured = tuple(int(d) for d in self.success_dims)
            if self.success_threshold is None or not measured or not set(measured) <= set(dims) \
                    or len(set(measured)) != len(measured):
                raise ValueError("BraxGoalEnv: success_dims (the goal entries success_threshold measures) must be "
                                 f"distinct entries of goal_dims={dims}, with success_threshold; got "
                                 f"{self.success_dims!r}")
            object.__setattr__(self, "success_dims", measured)
        goal = jax.eval_shape(self.sample_goal, key, start)
        if goal.shape != (len(dims),):
            raise ValueError(f"BraxGoalEnv: sample_goal must return the goal entries' values, shape ({len(dims)},), "
                             f"got {goal.shape}")
        if self.goal_state is None:
            warnings.warn("BraxGoalEnv: without goal_state the agent is shown the goal entries alone (zeros "
                          "elsewhere), which match no state of the env. Quasimetric RL needs reachable goal states "
                          "(its constraint acts on transitions between states); pass goal_state=(brax_state, goal) "
                          "-> a state whose goal entries are the goal", stacklevel=3)
        else:
            shown = jax.eval_shape(self.goal_state, start, goal)
            if shown.shape != (obs_dim,):
                raise ValueError(f"BraxGoalEnv: goal_state must return a goal state of shape ({obs_dim},), got "
                                 f"{shown.shape}")
        if self.success_key is not None:
            stepped = jax.eval_shape(self.env.step, start, jnp.zeros(self.action_dim))
            for when, state in (("reset", start), ("a step", stepped)):  # success is read after both
                known = sorted(set(state.metrics) | set(state.info))
                if self.success_key not in known:
                    raise ValueError(f"BraxGoalEnv: success_key {self.success_key!r} is in neither State.metrics nor "
                                     f"State.info of this env after {when}; it has {known}")

    def settings(self) -> dict:
        """What defines this env, as JSON-able settings that stay the same from one process to the next (functions
        by their qualified names, the Brax env by its class and backend), for run records."""
        def name(function):
            return None if function is None else f"{function.__module__}.{function.__qualname__}"
        return dict(name=type(self).__name__, env=type(self.env).__name__, backend=getattr(self.env, "backend", None),
                    goal_dims=list(self.goal_dims), episode_length=self.episode_length,
                    sample_goal=name(self.sample_goal), observe_state=name(self.observe_state),
                    goal_state=name(self.goal_state), success_threshold=self.success_threshold,
                    success_key=self.success_key,
                    success_dims=None if self.success_dims is None else list(self.success_dims))

    # GoalEnv's abstract parts, filled in __post_init__ (obs_dim, action_dim) or not used (reset/step are own).
    obs_dim = 0
    action_dim = 0

    def _observe(self, brax_state) -> jax.Array:
        obs = brax_state.obs if self.observe_state is None else self.observe_state(brax_state)
        return jnp.asarray(obs, jnp.float32)

    def _goal_entries(self, goal: jax.Array) -> jax.Array:
        """The goal values at the goal entries of an ``[obs_dim]`` vector, zeros elsewhere."""
        return jnp.zeros(self.obs_dim, jnp.float32).at[jnp.asarray(self.goal_dims)].set(goal)

    def _shown_goal(self, brax_state, goal: jax.Array) -> jax.Array:
        if self.goal_state is None:
            return self._goal_entries(goal)
        return jnp.asarray(self.goal_state(brax_state, goal), jnp.float32)

    def _reached(self, brax_state, observation: jax.Array, goal: jax.Array) -> jax.Array:
        if self.success_key is not None:
            table = brax_state.metrics if self.success_key in brax_state.metrics else brax_state.info
            return jnp.asarray(table[self.success_key]) != 0
        measured = jnp.asarray(self.goal_dims if self.success_dims is None else self.success_dims)
        full = self._goal_entries(goal)
        gap = observation[measured] - full[measured]
        return jnp.sqrt(jnp.sum(gap ** 2)) <= self.success_threshold

    def reset(self, key: jax.Array) -> GoalEnvState:
        env_key, goal_key = jax.random.split(key)
        brax_state = self.env.reset(env_key)
        goal = jnp.asarray(self.sample_goal(goal_key, brax_state), jnp.float32)
        observation = self._observe(brax_state)
        success = self._reached(brax_state, observation, goal)
        return GoalEnvState(physics=dict(brax=brax_state, goal=goal), observation=observation,
                            goal=self._shown_goal(brax_state, goal), reward=success.astype(jnp.float32),
                            success=success, done=jnp.bool_(False), steps=jnp.int32(0))

    def step(self, state: GoalEnvState, action: jax.Array) -> GoalEnvState:
        action = jnp.asarray(action, jnp.float32)
        if action.shape != (self.action_dim,):
            raise ValueError(f"BraxGoalEnv.step: action must have shape ({self.action_dim},) (vmap over a batch), "
                             f"got {action.shape}")
        brax_state = self.env.step(state.physics["brax"], jnp.clip(action, -1.0, 1.0))
        observation = self._observe(brax_state)
        success = self._reached(brax_state, observation, state.physics["goal"])
        steps = state.steps + 1
        return state.replace(physics=dict(brax=brax_state, goal=state.physics["goal"]), observation=observation,
                             reward=success.astype(jnp.float32), success=success,
                             done=steps >= self.episode_length, steps=steps)


class AsBraxEnv(_BraxEnv):
    """A suite :class:`~platonic_rl.envs.jax_env.GoalEnv` as a ``brax.envs.Env`` (see the module docstring)."""

    def __init__(self, env: GoalEnv):
        if not isinstance(env, GoalEnv):
            raise TypeError(f"AsBraxEnv: env must be a platonic_rl GoalEnv, got {type(env).__name__}")
        self.env = env

    def _view(self, state: GoalEnvState) -> BraxState:
        return BraxState(pipeline_state=state, obs=jnp.concatenate([state.observation, state.goal]),
                         reward=state.reward, done=jnp.zeros((), jnp.float32),
                         metrics={"success": state.success.astype(jnp.float32)}, info={})

    def reset(self, rng: jax.Array) -> BraxState:
        return self._view(self.env.reset(rng))

    def step(self, state: BraxState, action: jax.Array) -> BraxState:
        stepped = self._view(self.env.step(state.pipeline_state, action))
        # Brax's wrappers keep their bookkeeping in info and may add metrics: both carry over.
        return stepped.replace(info=state.info, metrics={**state.metrics, **stepped.metrics})

    @property
    def observation_size(self) -> int:
        return 2 * self.env.obs_dim

    @property
    def action_size(self) -> int:
        return self.env.action_dim

    @property
    def backend(self) -> str:
        return "jax"



def reacher(backend: str = "generalized", episode_length: int = 50, goal: str = "pose") -> BraxGoalEnv:
    """Brax's ``reacher`` as a goal env with :class:`~platonic_rl.envs.reacher.Reacher`'s observation layout, goal
    states and success rule (the same arm geometry: links 0.1 and 0.11 long): observation ``[cos q1, sin q1, cos q2,
    sin q2, qd1 / 10, qd2 / 10, x, y]`` with ``(x, y)`` the fingertip (Brax's own observation also shows the target,
    which a goal env must not); the goal is Brax's random target of the episode; success is the fingertip within
    0.05 of it (JaxGCRL's threshold). The task is Brax's, not the suite reacher's: Brax's physics, an arm that
    starts near its zero pose (not uniformly), and targets at a distance 0.2 U from the shoulder (so about a quarter
    within 0.05 of it), where the suite's reacher draws a uniformly random reachable configuration.

    ``goal="pose"``: the goal state is the arm at rest with its fingertip on the target (inverse kinematics, elbow
    bent the positive way; the elbow's +-3 rad limit leaves targets nearer the shoulder than 0.018 slightly
    out of reach, and then the pose's fingertip, not the target, is the goal), ``goal_dims`` the joint entries and the
    fingertip. ``goal="fingertip"``: the fingertip entries alone (JaxGCRL's goal; a warning says why QRL suffers)."""
    from brax import envs as brax_envs

    from platonic_rl.envs.reacher import GOAL_RADIUS, GOALS, LINK_LENGTHS, fingertip

    if goal not in GOALS:
        raise ValueError(f"reacher: goal must be one of {GOALS}, got {goal!r}")
    l1, l2 = LINK_LENGTHS

    def observe(brax_state):
        q, qd = brax_state.pipeline_state.q[:2], brax_state.pipeline_state.qd[:2]
        return jnp.concatenate([jnp.stack([jnp.cos(q[0]), jnp.sin(q[0]), jnp.cos(q[1]), jnp.sin(q[1])]), qd / 10.0,
                                fingertip(q)])

    def resting_pose(target):
        """Joint angles at rest whose fingertip is on ``target`` (or nearest it within the elbow's limit)."""
        cos_elbow = (jnp.sum(target ** 2) - l1 ** 2 - l2 ** 2) / (2 * l1 * l2)
        elbow = jnp.minimum(jnp.arccos(jnp.clip(cos_elbow, -1.0, 1.0)), 3.0)
        shoulder = jnp.arctan2(target[1], target[0]) - jnp.arctan2(l2 * jnp.sin(elbow), l1 + l2 * jnp.cos(elbow))
        return jnp.stack([shoulder, elbow])

    def pose_observation(brax_state):
        q = resting_pose(brax_state.pipeline_state.q[2:4])
        return jnp.concatenate([jnp.stack([jnp.cos(q[0]), jnp.sin(q[0]), jnp.cos(q[1]), jnp.sin(q[1])]),
                                jnp.zeros(2), fingertip(q)])

    if goal == "pose":
        dims = (0, 1, 2, 3, 6, 7)
        return BraxGoalEnv(brax_envs.get_environment("reacher", backend=backend), goal_dims=dims,
                           sample_goal=lambda key, s: pose_observation(s)[jnp.asarray(dims)],
                           observe_state=observe, goal_state=lambda s, g: pose_observation(s),
                           success_threshold=GOAL_RADIUS, success_dims=(6, 7), episode_length=episode_length)
    return BraxGoalEnv(brax_envs.get_environment("reacher", backend=backend), goal_dims=(6, 7),
                       sample_goal=lambda key, s: s.pipeline_state.q[2:4], observe_state=observe,
                       success_threshold=GOAL_RADIUS, episode_length=episode_length)


def device_put_replicated(value, devices):
    """``value`` stacked once per device on a new leading axis, that axis split over ``devices``: what
    ``jax.device_put_replicated`` did before JAX 0.10 removed it. Brax 0.14.2's training code (``brax.training``:
    SAC, PPO, APG) still calls it; ``jax.device_put_replicated = device_put_replicated`` before training lets it run
    with the suite's JAX (docs/environments.md)."""
    devices = list(devices)
    mesh = jax.sharding.Mesh(np.asarray(devices), ("devices",))
    stacked = jax.tree.map(lambda x: jnp.stack([jnp.asarray(x)] * len(devices)), value)
    return jax.device_put(stacked, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("devices")))
