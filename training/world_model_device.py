"""The world-model loop (Algorithm 1: Denoised MDP, Dreamer) as one compiled program: env steps, the sequence
replay, model and policy updates and evaluation on the device.

    env = DMCJaxEnv("cheetah-run", "distractors")
    loop = make_world_model_loop(denoised_config, env, WorldModelLoopConfig(env_steps=100_000))
    agent, metrics = jax.jit(loop.train)(jax.random.PRNGKey(0))                    # one seed
    agents, metrics = jax.jit(jax.vmap(loop.train))(jax.random.split(key, 3))      # three seeds, one program

The schedule of :mod:`~platonic_rl.training.world_model` (Dreamer's) with the host taken out: ``num_envs``
functional envs (:class:`~platonic_rl.envs.dmc_jax.DMCJaxEnv`, or any env of its ``reset``/``step`` form) run whole
episodes in lockstep inside a ``lax.scan`` with the agent's filter and policy.

1. **Prefill**: ``prefill_steps`` env steps (rounded up to whole rounds of ``num_envs`` episodes) of uniform random
   actions into the on-device :class:`~platonic_rl.envs.replay.SequenceBuffer`; with ``normalise_observations``,
   their per-dimension statistics set the agent's observation normaliser.
2. **Iterations**, each: ``updates_per_collect`` x ``num_envs`` updates
   (:func:`~platonic_rl.training.updates.update_steps` on :class:`~platonic_rl.envs.replay.SequenceSampler` batches
   of ``batch_size`` x ``chunk``), then one exploration episode per env (the agent's sampled action + N(0,
   noise^2), clipped) into the buffer: the host loop's 100 updates per 1000 env steps. When ``eval_every`` env steps
   have passed (and after the last iteration), ``eval_episodes`` deterministic episodes (tanh of the actor's mean,
   from the posterior mean), whose starts depend only on the iteration: ``eval_return``, its spread and the
   ``eval_task_return`` the unperturbed task paid.

Everything is a pure function of the key: ``jax.vmap(train)`` trains several seeds in one program, seed i of it
equal to a lone run of seed i. With ``mesh`` (a ``jax.sharding.Mesh`` with a ``"data"`` axis), the envs and every
sampled batch are split over its devices (data parallelism; the agent and the buffer are replicated).
:func:`train_world_model_on_device` runs it in compiled chunks from the host with the goal-conditioned device
loop's driver (:func:`~platonic_rl.training.device_loop.drive`): metrics rows, orbax checkpoints of the whole state
and exact resume. The agents are the host loop's, unchanged.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from platonic_rl.common.settings import budget, budget_paths, host_setting
from platonic_rl.envs.replay import SequenceBuffer, SequenceSampler
from platonic_rl.training.device_loop import EVAL_KEY, IteratedLoop, SplitSampler, drive, env_settings, split_over
from platonic_rl.training.updates import update_steps


@dataclasses.dataclass(frozen=True)
class WorldModelLoopConfig:
    """The host loop's :class:`~platonic_rl.training.world_model.DMCOnlineConfig` schedule (its defaults), with
    ``num_envs`` episodes collected together per iteration."""
    env_steps: int = budget(100_000)   # control steps, the prefill's included
    num_envs: int = 1                  # episodes collected together per iteration
    prefill_steps: int = 5_000         # uniformly random actions first
    updates_per_collect: int = 100     # per episode = per 1000 env steps
    batch_size: int = 50               # sequences per gradient step
    chunk: int = 50                    # agent steps per sequence
    exploration_noise: float = 0.3     # std of the Gaussian noise added to the agent's actions while collecting
    eval_every: int = 10_000           # env steps (and after the last iteration)
    eval_episodes: int = 10            # deterministic episodes per evaluation (mean return)
    normalise_observations: bool = True  # state observations standardised with the prefill's statistics
    buffer_episodes: int | None = None  # replay capacity; None: every episode of the budget
    chunk_iterations: int = host_setting(10)  # iterations per compiled call (train_world_model_on_device)
    checkpoint_every: int = host_setting(1)   # chunks; 0 disables

    def __post_init__(self):
        for name in ("env_steps", "num_envs", "updates_per_collect", "batch_size", "chunk", "eval_every",
                     "eval_episodes", "chunk_iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"WorldModelLoopConfig.{name} must be a positive int, got {value!r}")
        if isinstance(self.prefill_steps, bool) or not isinstance(self.prefill_steps, int) or self.prefill_steps < 1:
            raise ValueError(f"WorldModelLoopConfig.prefill_steps must be a positive int (the normaliser and the first "
                             f"updates read the prefill), got {self.prefill_steps!r}")
        if self.exploration_noise < 0:
            raise ValueError(f"WorldModelLoopConfig.exploration_noise must be >= 0, got {self.exploration_noise}")

    def rounds(self, episode_steps: int) -> tuple[int, int]:
        """``(prefill rounds, training iterations)`` for episodes of ``episode_steps`` env steps: a round is an
        episode from each env; the iterations are the rounds after the prefill within ``env_steps``, rounded up."""
        round_steps = self.num_envs * episode_steps
        prefill = math.ceil(self.prefill_steps / round_steps)
        return prefill, math.ceil(self.env_steps / round_steps) - prefill

    def check(self, env) -> None:
        prefill, iterations = self.rounds(episode_env_steps(env))
        if iterations < 1:
            raise ValueError(f"WorldModelLoopConfig: env_steps={self.env_steps} leaves no iteration after the prefill "
                             f"({prefill} rounds of {self.num_envs} episodes of {episode_env_steps(env)} env steps)")
        if self.buffer_episodes is not None and self.buffer_episodes < prefill * self.num_envs:
            raise ValueError(f"WorldModelLoopConfig.buffer_episodes must hold at least the prefill's "
                             f"{prefill * self.num_envs} episodes (or be None), got {self.buffer_episodes}")
        if self.chunk > env.episode_length + 1:
            raise ValueError(f"WorldModelLoopConfig.chunk must be <= {env.episode_length + 1} (an episode's "
                             f"observations), got {self.chunk}")


def episode_env_steps(env) -> int:
    """Env steps (control steps) of one of ``env``'s episodes: its agent steps times its action repeat."""
    return env.episode_length * getattr(env, "action_repeat", 1)


class WorldModelLoopState(struct.PyTreeNode):
    agent: Any
    buffer: SequenceBuffer
    key: jax.Array
    iteration: jax.Array   # int32: iterations done
    env_steps: jax.Array   # int32


@dataclasses.dataclass(frozen=True)
class WorldModelLoop(IteratedLoop):
    """The loop's pure functions: ``init(key)`` (agent created, buffer prefilled, normaliser set), ``run(state, n)``
    (``n`` iterations in one ``lax.scan``) and ``train(key) -> (agent, metrics [iterations])``."""
    agent_class: Any
    agent_config: Any
    env: Any
    config: WorldModelLoopConfig
    mesh: Any = None

    @property
    def round_steps(self) -> int:
        """Env steps of one round: an episode from each env."""
        return self.config.num_envs * episode_env_steps(self.env)

    @property
    def prefill_rounds(self) -> int:
        return self.config.rounds(episode_env_steps(self.env))[0]

    @property
    def iterations(self) -> int:
        return self.config.rounds(episode_env_steps(self.env))[1]

    def capacity(self) -> int:
        return self.config.buffer_episodes or (self.prefill_rounds + self.iterations) * self.config.num_envs

    def _split(self, tree):
        return split_over(self.mesh, tree)

    # ------------------------------------------------------------------------------------------ episodes
    def episodes(self, agent, key: jax.Array, num: int, mode: str) -> dict[str, jax.Array]:
        """``num`` whole episodes in lockstep: ``mode`` "random" (uniform actions), "explore" (the agent's sampled
        action + N(0, noise^2), clipped) or "greedy" (deterministic). Returns the buffer's layout, observations
        ``[num, L, D]``, prev_actions ``[num, L, A]``, rewards ``[num, L]`` (L = episode length + 1; zero action and
        reward first), and ``returns`` and ``task_returns`` ``[num]``."""
        env, noise = self.env, self.config.exploration_noise
        reset_key, act_key = jax.random.split(key)
        envs = self._split(jax.vmap(env.reset)(jax.random.split(reset_key, num)))
        latent = agent.initial_policy_state(num) if mode != "random" else None
        prev = jnp.zeros((num, env.action_dim), jnp.float32)

        def step(carry, k):
            envs, latent, prev = carry
            policy_key, noise_key = jax.random.split(k)
            if mode == "random":
                action = jax.random.uniform(policy_key, prev.shape, minval=-1.0, maxval=1.0)
            else:
                action, latent = agent.step(latent, envs.observation, None, prev,
                                            policy_key if mode == "explore" else None)
                if mode == "explore":
                    action = action + noise * jax.random.normal(noise_key, action.shape)
                action = jnp.clip(action, -1.0, 1.0)
            envs = jax.vmap(env.step)(envs, action)
            return (envs, latent, action), (envs.observation, action, envs.reward, envs.info["task_reward"])

        first = envs.observation
        _, (observations, actions, rewards, task_rewards) = jax.lax.scan(
            step, (envs, latent, prev), jax.random.split(act_key, env.episode_length))
        swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
        zeros = lambda x: jnp.zeros_like(x[:1])  # noqa: E731
        return dict(observations=jnp.concatenate([first[:, None], swap(observations)], 1),
                    prev_actions=swap(jnp.concatenate([zeros(actions), actions])),
                    rewards=swap(jnp.concatenate([zeros(rewards), rewards])),
                    returns=rewards.sum(0), task_returns=task_rewards.sum(0))

    def _store(self, buffer: SequenceBuffer, episodes: dict) -> SequenceBuffer:
        def add(buffer, episode):
            return buffer.add(*episode), None

        return jax.lax.scan(add, buffer, (episodes["observations"], episodes["prev_actions"],
                                          episodes["rewards"]))[0]

    # ------------------------------------------------------------------------------------------ the loop
    def init(self, key: jax.Array) -> WorldModelLoopState:
        env, config = self.env, self.config
        agent_key, prefill_key, key = jax.random.split(key, 3)
        agent = self.agent_class.create(self.agent_config, agent_key)
        buffer = SequenceBuffer.create(self.capacity(), env.episode_length + 1, (env.obs_dim,), env.action_dim)

        def prefill(buffer, round_key):
            return self._store(buffer, self.episodes(agent, round_key, config.num_envs, "random")), None

        buffer, _ = jax.lax.scan(prefill, buffer, jax.random.split(prefill_key, self.prefill_rounds))
        if config.normalise_observations:
            agent = agent.with_observation_statistics(
                buffer.observations[:self.prefill_rounds * config.num_envs])
        return WorldModelLoopState(agent=agent, buffer=buffer, key=key, iteration=jnp.int32(0),
                                   env_steps=jnp.int32(self.prefill_rounds * self.round_steps))

    def evaluate(self, agent, key: jax.Array) -> dict[str, jax.Array]:
        episodes = self.episodes(agent, key, self.config.eval_episodes, "greedy")
        return dict(eval_return=jnp.mean(episodes["returns"]), eval_return_std=jnp.std(episodes["returns"]),
                    eval_task_return=jnp.mean(episodes["task_returns"]))

    def iterate(self, state: WorldModelLoopState, iteration: jax.Array | None = None):
        """Updates, then an exploration round, then (when due) the evaluation; ``iteration`` as in
        :meth:`~platonic_rl.training.device_loop.DeviceLoop.iterate` (unbatched under vmap)."""
        config = self.config
        key, update_key, collect_key = jax.random.split(state.key, 3)
        sampler = SplitSampler(SequenceSampler(state.buffer, config.batch_size, config.chunk), self.mesh)
        agent, metrics, finite = update_steps(state.agent, sampler, jax.random.split(
            update_key, config.updates_per_collect * config.num_envs))
        episodes = self.episodes(agent, collect_key, config.num_envs, "explore")
        buffer = self._store(state.buffer, episodes)
        env_steps = state.env_steps + self.round_steps
        iteration = state.iteration + 1 if iteration is None else iteration
        passed = env_steps // config.eval_every > (env_steps - self.round_steps) // config.eval_every
        due = passed | (iteration == self.iterations)
        eval_key = jax.random.fold_in(jax.random.PRNGKey(EVAL_KEY), iteration)
        nan = jnp.float32(jnp.nan)
        evaluations = jax.lax.cond(due, lambda: self.evaluate(agent, eval_key),
                                   lambda: dict(eval_return=nan, eval_return_std=nan, eval_task_return=nan))
        row = dict(metrics, env_steps=env_steps, train_return=jnp.mean(episodes["returns"]), **evaluations,
                   **{f"finite/{name}": jnp.all(value) for name, value in finite.items()})
        return WorldModelLoopState(agent=agent, buffer=buffer, key=key, iteration=state.iteration + 1,
                                   env_steps=env_steps), row


def make_world_model_loop(agent_config, env, config: WorldModelLoopConfig, agent_class=None,
                          mesh=None) -> WorldModelLoop:
    """The loop of ``agent_config``'s agent (a :class:`~platonic_rl.agents.denoised_mdp.DenoisedMDPConfig` by
    default: Denoised MDP or Dreamer) on ``env``, checked before anything is traced."""
    from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent

    config.check(env)
    model = agent_config.model
    if model.pixels or tuple(model.obs_shape) != (env.obs_dim,) or model.action_dim != env.action_dim:
        raise ValueError(f"make_world_model_loop: the agent's model takes observations {tuple(model.obs_shape)} "
                         f"(pixels={model.pixels}) and {model.action_dim} actions; the env has state observations "
                         f"({env.obs_dim},) and {env.action_dim} actions")
    if mesh is not None:
        if "data" not in mesh.axis_names:
            raise ValueError(f"make_world_model_loop: mesh needs a 'data' axis, has {mesh.axis_names}")
        for name in ("num_envs", "batch_size", "eval_episodes"):
            if getattr(config, name) % mesh.shape["data"]:
                raise ValueError(f"make_world_model_loop: WorldModelLoopConfig.{name}={getattr(config, name)} must "
                                 f"be a multiple of the mesh's {mesh.shape['data']} devices on its 'data' axis")
    return WorldModelLoop(agent_class or DenoisedMDPAgent, agent_config, env, config, mesh)


def train_world_model_on_device(agent_config, env, config: WorldModelLoopConfig,
                                seed: int | tuple[int, ...] = 0, run_dir: str | Path | None = None,
                                resume: bool = True, overwrite: bool = False, desc: str = "world model",
                                agent_class=None, mesh=None) -> tuple[Any, list[dict]]:
    """The loop in compiled chunks from the host (:func:`~platonic_rl.training.device_loop.drive`): rows (one per
    iteration: the update metrics' means, ``train_return``, ``eval_return`` where evaluated, per seed
    ``eval_return/<seed>`` when ``seed`` is a tuple of seeds vmapped in one program), checkpoints and exact resume.
    Returns ``(agent, rows)``."""
    loop = make_world_model_loop(agent_config, env, config, agent_class, mesh)
    return drive(loop, seed, run_dir, resume, overwrite, desc, dict(env=env_settings(env)),
                 resumable=budget_paths(config, "loop"), headline="eval_return",
                 total_env_steps=(loop.prefill_rounds + loop.iterations) * loop.round_steps)
