"""A :class:`~platonic_rl.envs.jax_env.GoalEnv` as a gymnasium vector env (its own module: only it needs
gymnasium; ``platonic_rl.envs.jax_env.GymnasiumVectorEnv`` names it too)."""
from __future__ import annotations


import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from platonic_rl.envs.jax_env import GoalEnv, reset_batch, step_batch


class GymnasiumVectorEnv(VectorEnv):
    """A :class:`GoalEnv` as a gymnasium vector env of goal envs: ``num_envs`` copies stepped by one jitted
    call, dict observations ``observation`` / ``achieved_goal`` / ``desired_goal`` (float32), reward 1 on
    reaching the goal, ``truncated`` at the episode's last step (never ``terminated``), ``info["is_success"]``,
    and gymnasium's default next-step autoreset. ``reset(seed=s)`` draws every env's start and goal from
    ``PRNGKey(s)``; the env's spec carries ``max_episode_steps``, so
    :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter` and the host loops take it as it is::

        GoalEnvAdapter(GymnasiumVectorEnv(PointMaze("umaze"), num_envs=8))
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, env: GoalEnv, num_envs: int):
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"GymnasiumVectorEnv: num_envs must be a positive int, got {num_envs!r}")
        self.goal_env, self.num_envs = env, int(num_envs)
        dims = list(env.goal_dims)
        box = lambda n: gym.spaces.Box(-np.inf, np.inf, (n,), np.float32)  # noqa: E731
        self.single_observation_space = gym.spaces.Dict(
            observation=box(env.obs_dim), achieved_goal=box(len(dims)), desired_goal=box(len(dims)))
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.spec = gym.envs.registration.EnvSpec(id=f"platonic_rl/{type(env).__name__}-v0",
                                                  max_episode_steps=env.episode_length)
        self._dims = np.asarray(dims)
        self._reset = jax.jit(lambda key: reset_batch(env, key, self.num_envs))
        self._step = jax.jit(lambda state, actions: step_batch(env, state, actions))
        self._state, self._key, self._needs_reset = None, jax.random.PRNGKey(0), None

    def _observe(self):
        s = self._state
        obs = np.asarray(s.observation, np.float32)
        return dict(observation=obs, achieved_goal=obs[:, self._dims],
                    desired_goal=np.asarray(s.goal, np.float32)[:, self._dims])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._key = jax.random.PRNGKey(seed)
        self._key, key = jax.random.split(self._key)
        self._state = self._reset(key)
        self._needs_reset = np.zeros(self.num_envs, bool)
        return self._observe(), {}

    def step(self, actions):
        if self._state is None:
            raise RuntimeError("GymnasiumVectorEnv.step before reset")
        actions = np.asarray(actions, np.float32)
        if actions.shape != (self.num_envs, self.goal_env.action_dim):
            raise ValueError(f"GymnasiumVectorEnv.step: actions must have shape "
                             f"({self.num_envs}, {self.goal_env.action_dim}), got {actions.shape}")
        stepped = self._step(self._state, jnp.asarray(actions))
        if self._needs_reset.any():  # next-step autoreset: those envs start a new episode instead
            self._key, key = jax.random.split(self._key)
            fresh = self._reset(key)
            mask = jnp.asarray(self._needs_reset)
            stepped = jax.tree.map(lambda new, old: jnp.where(mask.reshape((-1,) + (1,) * (old.ndim - 1)), new, old),
                                   fresh, stepped)
        self._state = stepped
        reward = np.array(stepped.reward, np.float64)
        truncated = np.array(stepped.done, bool)
        success = np.asarray(stepped.success, bool)
        if self._needs_reset.any():
            reward[self._needs_reset], truncated[self._needs_reset] = 0.0, False
        self._needs_reset = truncated.copy()
        return self._observe(), reward, np.zeros(self.num_envs, bool), truncated, {"is_success": success}
