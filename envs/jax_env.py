"""Goal-conditioned environments as pure JAX functions, for training loops that run on the device.

    env = point_maze.PointMaze("umaze")                          # any GoalEnv
    state = env.reset(key)                                        # one env; jax.vmap(env.reset)(keys) for many
    state = env.step(state, action)                               # jit-, vmap- and scan-able; no host calls
    state.observation, state.goal, state.reward, state.success, state.done

A :class:`GoalEnv` is a frozen dataclass (hashable, so it is static under ``jit``) whose ``reset`` and ``step`` are
pure functions of arrays. Its state (:class:`GoalEnvState`) carries the env's own physics pytree and what every
loop reads: the observation, the **goal state** (an observation vector whose goal dimensions ``goal_dims`` hold
the goal and all others zero, as :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter` builds for gymnasium goal
envs), the sparse reward (1 when the goal is reached, else 0), ``success`` (reached at this step) and ``done``
(the episode's last step: episodes run exactly ``episode_length`` steps). Actions are clipped to [-1, 1].

:func:`rollout` runs whole batched episodes in one ``lax.scan``;
:class:`~platonic_rl.envs.jax_gymnasium.GymnasiumVectorEnv` shows any GoalEnv as a gymnasium vector env of goal envs
(dict observations, ``info["is_success"]``, autoreset on the next step), so the host loops and users' own gymnasium
code run the same dynamics.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from platonic_rl.envs.goal_env import goal_mask


class GoalEnvState(struct.PyTreeNode):
    physics: Any             # the env's own state (positions, velocities, ...)
    observation: jax.Array   # [obs_dim] float32
    goal: jax.Array          # [obs_dim] goal state (zero outside goal_dims)
    reward: jax.Array        # float32: 1 when the goal is reached at this step, else 0
    success: jax.Array       # bool: the goal is reached at this step
    done: jax.Array          # bool: this was the episode's last step
    steps: jax.Array         # int32: steps taken in this episode


class GoalEnv:
    """Base of the functional goal envs. A subclass is a frozen dataclass that defines ``obs_dim``,
    ``action_dim``, ``goal_dims``, ``episode_length`` and

    * ``init(key) -> (physics, goal_state)``: a start and a goal;
    * ``dynamics(physics, action) -> physics``: one step (``action`` already clipped to [-1, 1]);
    * ``observe(physics) -> observation [obs_dim]``;
    * ``reached(observation, goal_state) -> bool``.
    """

    obs_dim: int
    action_dim: int
    goal_dims: tuple[int, ...]
    episode_length: int

    @property
    def goal_mask(self) -> np.ndarray:
        """``[obs_dim]``: 1 on the goal dimensions, 0 elsewhere (:func:`~platonic_rl.envs.goal_env.goal_mask`)."""
        return goal_mask(self.obs_dim, self.goal_dims)

    def reset(self, key: jax.Array) -> GoalEnvState:
        physics, goal = self.init(key)
        observation = self.observe(physics)
        success = self.reached(observation, goal)
        return GoalEnvState(physics=physics, observation=observation, goal=goal,
                            reward=success.astype(jnp.float32), success=success, done=jnp.bool_(False),
                            steps=jnp.int32(0))

    def step(self, state: GoalEnvState, action: jax.Array) -> GoalEnvState:
        action = jnp.asarray(action, jnp.float32)
        if action.shape != (self.action_dim,):
            raise ValueError(f"{type(self).__name__}.step: action must have shape ({self.action_dim},) (vmap over a "
                             f"batch), got {action.shape}")
        physics = self.dynamics(state.physics, jnp.clip(action, -1.0, 1.0))
        observation = self.observe(physics)
        success = self.reached(observation, state.goal)
        steps = state.steps + 1
        return state.replace(physics=physics, observation=observation, reward=success.astype(jnp.float32),
                             success=success, done=steps >= self.episode_length, steps=steps)


@dataclasses.dataclass(frozen=True)
class Normalized(GoalEnv):
    """``env`` seen through affinely normalised observations and goal states, ``(x - center) / scale`` (goal
    states masked to the goal dimensions again), e.g. ``Normalized(PointMaze("large"), layout.obs_center,
    layout.obs_scale)`` with ``layout = maze2d.get_layout("large")``.
    Success, reward and ``done`` are ``env``'s, computed on its own observations (kept in ``state.physics``, the
    wrapped env's state)."""

    env: GoalEnv
    center: tuple[float, ...]
    scale: tuple[float, ...]

    def __post_init__(self):
        for name in ("center", "scale"):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != self.env.obs_dim:
                raise ValueError(f"Normalized: {name} must have obs_dim={self.env.obs_dim} entries, got {len(value)}")
            object.__setattr__(self, name, value)
        if any(v == 0 for v in self.scale):
            raise ValueError(f"Normalized: scale must be nonzero everywhere, got {self.scale}")

    obs_dim = property(lambda self: self.env.obs_dim)
    action_dim = property(lambda self: self.env.action_dim)
    goal_dims = property(lambda self: self.env.goal_dims)
    episode_length = property(lambda self: self.env.episode_length)

    def normalize(self, x: jax.Array) -> jax.Array:
        return (x - jnp.asarray(self.center, jnp.float32)) / jnp.asarray(self.scale, jnp.float32)

    def _view(self, inner: GoalEnvState) -> GoalEnvState:
        return inner.replace(physics=inner, observation=self.normalize(inner.observation),
                             goal=self.normalize(inner.goal) * jnp.asarray(self.goal_mask))

    def reset(self, key: jax.Array) -> GoalEnvState:
        return self._view(self.env.reset(key))

    def step(self, state: GoalEnvState, action: jax.Array) -> GoalEnvState:
        return self._view(self.env.step(state.physics, action))


def reset_batch(env: GoalEnv, key: jax.Array, num_envs: int) -> GoalEnvState:
    """``num_envs`` independent resets (every leaf gains a leading ``[num_envs]`` axis)."""
    return jax.vmap(env.reset)(jax.random.split(key, num_envs))


def step_batch(env: GoalEnv, state: GoalEnvState, actions: jax.Array) -> GoalEnvState:
    return jax.vmap(env.step)(state, actions)


def rollout(env: GoalEnv, policy: Callable[[jax.Array, jax.Array, jax.Array], jax.Array], key: jax.Array,
            num_envs: int) -> dict[str, jax.Array]:
    """``num_envs`` whole episodes in one ``lax.scan`` (jit it with ``env`` and ``policy`` static, or call it
    inside a jitted function). ``policy(observations [N, D], goals [N, D], key) -> actions [N, A]``.

    Returns observations ``[N, T + 1, D]``, actions ``[N, T, A]`` (clipped), goals ``[N, D]``, success ``[N]``
    (the goal reached at any step, the start included) and final_success ``[N]``."""
    return _rollout(env, lambda carried, observations, goals, step_key: (policy(observations, goals, step_key), None),
                    None, key, num_envs)


def rollout_acting(env: GoalEnv, policy: Any, key: jax.Array, num_envs: int) -> dict[str, jax.Array]:
    """:func:`rollout` with anything of the agents' acting signature (an agent, a policy of
    :mod:`platonic_rl.agents.qrl_policies`): ``policy.step(policy_state, observations, goals)`` without a key
    (deterministic), its state carried from ``policy.initial_policy_state(num_envs)``. ``key`` draws the episodes
    alone, so every policy rolled out with one key meets the same starts and goals."""
    act = lambda carried, observations, goals, _: policy.step(carried, observations, goals)  # noqa: E731
    return _rollout(env, act, policy.initial_policy_state(num_envs), key, num_envs)


def _rollout(env: GoalEnv, act: Callable, carried: Any, key: jax.Array, num_envs: int) -> dict[str, jax.Array]:
    """The episodes of :func:`rollout`, ``act(carried, observations, goals, key) -> (actions, carried)``."""
    reset_key, policy_key = jax.random.split(key)
    state = reset_batch(env, reset_key, num_envs)

    def body(loop, step_key):
        state, carried = loop
        actions, carried = act(carried, state.observation, state.goal, step_key)
        actions = jnp.clip(actions, -1.0, 1.0)
        state = step_batch(env, state, actions)
        return (state, carried), (state.observation, actions, state.success)

    (final, _), (observations, actions, successes) = jax.lax.scan(
        body, (state, carried), jax.random.split(policy_key, env.episode_length))
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
    return dict(observations=jnp.concatenate([state.observation[:, None], swap(observations)], 1),
                actions=swap(actions), goals=state.goal,
                success=state.success | successes.any(0), final_success=final.success)


def random_policy(action_dim: int):
    """Uniform actions in [-1, 1]: ``policy(observations, goals, key)``."""
    return lambda observations, goals, key: jax.random.uniform(key, (observations.shape[0], action_dim),
                                                              minval=-1.0, maxval=1.0)


def measure_steps_per_second(env, num_envs: int, steps: int = 1000, seed: int = 0) -> float:
    """Env steps per second of ``num_envs`` envs (a GoalEnv, or any env of its ``reset(key)`` / ``step(state,
    action)`` form with ``action_dim``, e.g. :class:`~platonic_rl.envs.dmc_jax.DMCJaxEnv`) stepped together with
    random actions inside one jitted ``lax.scan`` of ``steps`` steps, from states reset beforehand (resets and
    compilation excluded; the best of three calls)."""
    import time

    @jax.jit
    def run(state, key):
        def body(state, k):
            actions = jax.random.uniform(k, (num_envs, env.action_dim), minval=-1.0, maxval=1.0)
            return step_batch(env, state, actions), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0].observation

    key = jax.random.PRNGKey(seed)
    state = jax.block_until_ready(jax.jit(lambda k: reset_batch(env, k, num_envs))(key))
    jax.block_until_ready(run(state, key))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(run(state, key))
        best = min(best, time.perf_counter() - start)
    return num_envs * steps / best
