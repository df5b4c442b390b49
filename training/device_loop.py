"""Online goal-conditioned training as one compiled program: env steps, replay and updates on the device.

    train = make_train(QRLContinuousConfig(obs_dim=4, action_dim=2), PointMaze("umaze"), DeviceLoopConfig())
    agent, metrics = jax.jit(train)(jax.random.PRNGKey(0))            # one seed
    agents, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 5))  # five seeds, one program

The loop of :mod:`~platonic_rl.training.goal_online` with the host taken out (the scheme of JaxGCRL and
PureJaxRL): a functional goal env (:mod:`platonic_rl.envs.jax_env`) steps ``num_envs`` envs in lockstep.

1. **Prefill**: ``prefill_episodes`` (rounded up to whole batches of ``num_envs``) episodes of uniform random
   actions, stored in the on-device :class:`~platonic_rl.envs.replay.EpisodeBuffer`.
2. **Iterations**, each: a ``lax.scan`` of ``unroll`` env steps with the agent's exploration policy (its
   sampled action + N(0, noise^2), clipped), written into the episodes in progress; when they end (``unroll``
   divides the episode length, so every ``episode_length / unroll`` iterations) they join the buffer and the
   envs reset; then ``updates_per_iteration`` updates through :func:`~platonic_rl.training.updates.update_steps`
   on :class:`~platonic_rl.envs.replay.GoalSampler` batches (future-state goals, P(k) ~ discount^k, masked to
   the goal dimensions; rewards -1); every ``eval_every`` iterations (and after the last) ``eval_episodes``
   deterministic episodes whose starts and goals depend only on the iteration (the same for every seed and
   agent), success = the goal reached at any step; ``eval_policies`` (:mod:`platonic_rl.training.evaluation`)
   act on the same episodes, logged as ``eval_success_<name>``.

Everything is a pure function of the key: ``jax.vmap(train)`` over keys trains several seeds in one program,
and seed i of it equals a lone run of seed i. With ``mesh`` (a ``jax.sharding.Mesh`` with a ``"data"`` axis, over
the devices of one host or of many after ``jax.distributed.initialize``: :mod:`platonic_rl.training.distributed`)
the envs, the episodes in progress and every sampled batch are split over the devices and the agent and the
buffer are replicated: data parallelism, the gradients averaged by XLA's collectives.

:func:`train_on_device` runs the same program in compiled chunks of ``chunk_iterations`` from the host: a
progress bar, metrics rows and orbax checkpoints of the whole state (agent, buffer, envs, episodes in
progress, keys, counters) in a :class:`~platonic_rl.training.run.RunDirectory`, and exact resume.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from platonic_rl.common.policies import explore
from platonic_rl.common.settings import HOST, budget, budget_paths, host_setting, recorded_fields
from platonic_rl.agents.contract import check_agent
from platonic_rl.envs import jax_env
from platonic_rl.envs.replay import EpisodeBuffer, GoalSampler
from platonic_rl.training.evaluation import build_policy, check_eval_policies, describe, metric_name
from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import agent_settings
from platonic_rl.training.schedule import checkpoint_due
from platonic_rl.training.updates import check_finite, update_steps

EVAL_KEY = 10_000_000  # evaluation episodes after iteration i use fold_in(PRNGKey(EVAL_KEY), i): the same everywhere


@dataclasses.dataclass(frozen=True)
class DeviceLoopConfig:
    num_envs: int = 256               # envs stepped together (split over the mesh's devices, if any)
    unroll: int = 50                  # env steps per env per iteration; must divide the env's episode length
    updates_per_iteration: int = 8    # gradient steps per iteration, after its env steps
    iterations: int = budget(100)     # training iterations after the prefill
    prefill_episodes: int = 256       # random-action episodes first (rounded up to whole batches of num_envs)
    batch_size: int = 256             # transitions per gradient step
    exploration_noise: float = 0.3    # std of the Gaussian noise added to the agent's actions while collecting
    p_future: float = 1.0             # share of goals drawn from the same episode's future, else a random buffer state
    discount: float = 0.99            # of the future-goal offset distribution
    eval_every: int = 10              # iterations (and after the last)
    eval_episodes: int = 64           # deterministic episodes per evaluation, the same for every seed and method
    eval_policies_after: int = 0      # the evaluation policies act only at evaluations after this iteration
    #                                   (a policy may cost many times the agent's episodes: e.g. the last few only)
    buffer_episodes: int | None = None  # replay capacity; None: every episode of the budget
    chunk_iterations: int = host_setting(10)  # iterations per compiled call in train_on_device
    checkpoint_every: int = host_setting(1)   # chunks (train_on_device); 0 disables

    def __post_init__(self):
        for name in ("num_envs", "unroll", "updates_per_iteration", "iterations", "prefill_episodes", "batch_size",
                     "eval_every", "eval_episodes", "chunk_iterations"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DeviceLoopConfig.{name} must be a positive int, got {value!r}")
        if not 0.0 <= self.p_future <= 1.0 or not 0.0 < self.discount < 1.0:
            raise ValueError(f"DeviceLoopConfig: p_future must be in [0, 1] and discount in (0, 1), got "
                             f"{self.p_future}, {self.discount}")
        if not isinstance(self.eval_policies_after, int) or self.eval_policies_after < 0:
            raise ValueError(f"DeviceLoopConfig.eval_policies_after must be an int >= 0 (an iteration), got "
                             f"{self.eval_policies_after!r}")
        if self.buffer_episodes is not None and self.buffer_episodes < 1:
            raise ValueError(f"DeviceLoopConfig.buffer_episodes must be positive or None, got {self.buffer_episodes}")

    def prefill_rounds(self) -> int:
        return math.ceil(self.prefill_episodes / self.num_envs)

    def check(self, env: jax_env.GoalEnv) -> None:
        """Raise ``ValueError`` unless this loop fits ``env``."""
        if env.episode_length % self.unroll:
            raise ValueError(f"DeviceLoopConfig.unroll={self.unroll} must divide the env's episode length "
                             f"{env.episode_length} (episodes are stored whole, all envs in lockstep)")

    def env_steps(self, env: jax_env.GoalEnv) -> int:
        """The budget in env steps: the prefill plus ``iterations`` x ``num_envs`` x ``unroll``."""
        return (self.prefill_rounds() * env.episode_length + self.iterations * self.unroll) * self.num_envs

    def capacity(self, env: jax_env.GoalEnv) -> int:
        if self.buffer_episodes is not None:
            return self.buffer_episodes
        episodes = self.iterations * self.unroll // env.episode_length
        return (self.prefill_rounds() + episodes) * self.num_envs


class LoopState(struct.PyTreeNode):
    agent: Any
    buffer: EpisodeBuffer
    envs: jax_env.GoalEnvState       # [num_envs]
    episode_observations: jax.Array  # [num_envs, T + 1, D] the episodes in progress
    episode_actions: jax.Array       # [num_envs, T, A]
    episode_success: jax.Array       # [num_envs] reached at any step so far
    key: jax.Array
    iteration: jax.Array             # int32: iterations done
    env_steps: jax.Array             # int32


def _agent_class(agent_config):
    from platonic_rl.agents import REGISTRY

    for entry in REGISTRY.values():
        if entry.config is type(agent_config):
            return entry.agent
    raise TypeError(f"make_loop: no registered agent takes a {type(agent_config).__name__}; pass agent_class")


class IteratedLoop:
    """What the device loops share (this module's and :mod:`~platonic_rl.training.world_model_device`'s), over a
    loop's own ``init(key)``, ``iterate(state, iteration)`` and ``iterations``: ``run``, ``train`` and ``jitted``."""

    def run(self, state, iterations: int, done: jax.Array | int | None = None) -> tuple[Any, dict]:
        """``iterations`` iterations after the ``done`` ones (default ``state.iteration``; give it unbatched when
        vmapping over seeds: see :meth:`DeviceLoop.iterate`), in one ``lax.scan``."""
        done = state.iteration if done is None else done
        return jax.lax.scan(self.iterate, state, done + 1 + jnp.arange(iterations, dtype=jnp.int32))

    def train(self, key: jax.Array) -> tuple[Any, dict]:
        state, metrics = self.run(self.init(key), self.iterations, done=0)
        return state.agent, metrics

    def jitted(self, vmapped: bool = False):
        """``(init, run)`` jitted, ``run(state, n)`` with ``n`` static; ``vmapped``: over a leading seed axis of
        keys and states. Equal loops share them (a bounded cache), so a run continued in the same process does not
        compile again."""
        try:
            return _compile_cached(self, vmapped)
        except TypeError:  # an unhashable agent config or env: compiled for this caller only
            return _compile(self, vmapped)


@dataclasses.dataclass(frozen=True)
class DeviceLoop(IteratedLoop):
    """The loop's pure functions (what :func:`make_train` composes): ``init(key) -> LoopState`` (agent created,
    buffer prefilled, envs reset), ``run(state, n) -> (state, metrics [n])`` (``n`` iterations in one
    ``lax.scan``; jit it with ``n`` static) and ``train(key) -> (agent, metrics [iterations])``."""

    agent_class: Any
    agent_config: Any
    env: jax_env.GoalEnv
    config: DeviceLoopConfig
    mesh: Any = None
    eval_policies: tuple = ()         # ((name, build(agent) -> policy), ...): evaluated beside the agent

    # -------------------------------------------------------------------------------- placement
    def _split(self, tree):
        return split_over(self.mesh, tree)

    def sampler(self, buffer):
        """The update's batches: goal-relabelled transitions from ``buffer`` (split over the mesh if there is one)."""
        sampler = GoalSampler(buffer, jnp.asarray(self.env.goal_mask), self.config.batch_size,
                              self.config.p_future, self.config.discount)
        return sampler if self.mesh is None else SplitSampler(sampler, self.mesh)

    # ------------------------------------------------------------------------------------ init
    def init(self, key: jax.Array) -> LoopState:
        env, config = self.env, self.config
        agent_key, prefill_key, reset_key, key = jax.random.split(key, 4)
        agent = self.agent_class.create(self.agent_config, agent_key)
        buffer = EpisodeBuffer.create(config.capacity(env), env.episode_length, env.obs_dim, env.action_dim)
        policy = jax_env.random_policy(env.action_dim)

        def prefill(buffer, round_key):
            episodes = jax_env.rollout(env, policy, round_key, config.num_envs)
            return buffer.add(episodes["observations"], episodes["actions"]), None

        buffer, _ = jax.lax.scan(prefill, buffer, jax.random.split(prefill_key, config.prefill_rounds()))
        envs = self._split(jax_env.reset_batch(env, reset_key, config.num_envs))
        return LoopState(agent=agent, buffer=buffer, envs=envs, **self._new_episodes(envs), key=key,
                         iteration=jnp.int32(0),
                         env_steps=jnp.int32(config.prefill_rounds() * config.num_envs * env.episode_length))

    def _new_episodes(self, envs):
        n, t, env = self.config.num_envs, self.env.episode_length, self.env
        observations = jnp.zeros((n, t + 1, env.obs_dim), jnp.float32).at[:, 0].set(envs.observation)
        return self._split(dict(episode_observations=observations,
                                episode_actions=jnp.zeros((n, t, env.action_dim), jnp.float32),
                                episode_success=envs.success))

    # ------------------------------------------------------------------------------- iteration
    def _collect(self, state: LoopState, key: jax.Array) -> tuple[LoopState, jax.Array]:
        env, config = self.env, self.config
        start = state.envs.steps[0]  # all envs in lockstep

        def env_step(carry, inputs):
            envs, observations, actions, success = carry
            offset, step_key = inputs
            action = explore(state.agent, envs.observation, envs.goal, step_key, config.exploration_noise)
            envs = jax_env.step_batch(env, envs, action)
            t = start + offset
            observations = jax.lax.dynamic_update_index_in_dim(observations, envs.observation, t + 1, 1)
            actions = jax.lax.dynamic_update_index_in_dim(actions, action, t, 1)
            return (envs, observations, actions, success | envs.success), None

        collect_key, reset_key = jax.random.split(key)
        carry = (state.envs, state.episode_observations, state.episode_actions, state.episode_success)
        inputs = (jnp.arange(config.unroll), jax.random.split(collect_key, config.unroll))
        (envs, observations, actions, success), _ = jax.lax.scan(env_step, carry, inputs)
        state = state.replace(envs=envs, episode_observations=observations, episode_actions=actions,
                              episode_success=success, env_steps=state.env_steps + config.num_envs * config.unroll)
        ended = envs.steps[0] >= env.episode_length

        def store_and_reset(state):
            envs = self._split(jax_env.reset_batch(env, reset_key, config.num_envs))
            return state.replace(buffer=state.buffer.add(state.episode_observations, state.episode_actions),
                                 envs=envs, **self._new_episodes(envs))

        explore_success = jnp.where(ended, jnp.mean(success.astype(jnp.float32)), jnp.nan)
        return jax.lax.cond(ended, store_and_reset, lambda s: s, state), explore_success

    def evaluate(self, agent, key: jax.Array, buffer: EpisodeBuffer, policies_due: jax.Array | bool = True
                 ) -> dict[str, jax.Array]:
        """Success rates over ``eval_episodes`` episodes drawn from ``key``: ``eval_success`` of ``agent``'s
        deterministic policy and, where ``policies_due``, ``eval_success_<name>`` of each evaluation policy built
        from it (and, for one that plans over states, from ``buffer``'s), on the same episodes (NaN where not due)."""
        success = lambda policy: jnp.mean(  # noqa: E731
            jax_env.rollout_acting(self.env, policy, key, self.config.eval_episodes)["success"])
        states_key = jax.random.fold_in(key, 1)
        policies = lambda: {metric_name(name): success(build_policy(build, agent, buffer, states_key))  # noqa: E731
                            for name, build in self.eval_policies}
        skipped = lambda: {metric_name(name): jnp.float32(jnp.nan) for name, _ in self.eval_policies}  # noqa: E731
        return dict(eval_success=success(agent), **jax.lax.cond(policies_due, policies, skipped))

    def iterate(self, state: LoopState, iteration: jax.Array | None = None) -> tuple[LoopState, dict]:
        """One iteration: collect, update, maybe evaluate. Returns the state and the iteration's metrics.
        ``iteration``: its number, ``state.iteration + 1``; vmapped runs pass it unbatched, so that the evaluation
        stays a branch taken only when due (under vmap a batched predicate makes ``lax.cond`` run both branches)."""
        config = self.config
        key, collect_key, update_key = jax.random.split(state.key, 3)
        state, explore_success = self._collect(state, collect_key)
        agent, metrics, finite = update_steps(state.agent, self.sampler(state.buffer),
                                              jax.random.split(update_key, config.updates_per_iteration))
        iteration = state.iteration + 1 if iteration is None else iteration
        due = (iteration % config.eval_every == 0) | (iteration == config.iterations)
        eval_key = jax.random.fold_in(jax.random.PRNGKey(EVAL_KEY), iteration)
        not_due = {name: jnp.float32(jnp.nan) for name in self.evaluate_names()}
        policies_due = iteration > config.eval_policies_after
        evaluations = jax.lax.cond(due, lambda: self.evaluate(agent, eval_key, state.buffer, policies_due),
                                   lambda: not_due)
        row = dict(metrics, env_steps=state.env_steps, explore_success=explore_success, **evaluations,
                   **{f"finite/{name}": jnp.all(value) for name, value in finite.items()})
        return state.replace(agent=agent, key=key, iteration=state.iteration + 1), row

    def evaluate_names(self) -> list[str]:
        return ["eval_success", *(metric_name(name) for name, _ in self.eval_policies)]

    @property
    def iterations(self) -> int:
        return self.config.iterations


def split_over(mesh, tree):
    """``tree``'s arrays, whose leading axis is the envs' (or a batch's), constrained to be split over ``mesh``'s
    ``"data"`` axis (``tree`` itself without a mesh)."""
    if mesh is None:
        return tree
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec("data"))
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)


class SplitSampler(struct.PyTreeNode):
    """A sampler whose batches are split over ``mesh`` (data parallelism)."""

    sampler: Any
    mesh: Any = struct.field(pytree_node=False)

    def sample(self, key):
        return split_over(self.mesh, self.sampler.sample(key))


def _as_dict(state) -> dict:
    """The state as a dict (the run directory's form: its replay buffer resizes when a resumed budget grows)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}


def make_loop(agent_config, env: jax_env.GoalEnv, config: DeviceLoopConfig, agent_class=None,
              mesh=None, eval_policies=None) -> DeviceLoop:
    """The device loop of ``agent_config``'s agent (or ``agent_class``, any agent of the contract whose
    ``create(config, key)`` builds it) on ``env``; checks that they fit before anything is traced.
    ``eval_policies``: ``{name: build(agent) -> policy}`` evaluated beside the agent
    (:mod:`platonic_rl.training.evaluation`)."""
    config.check(env)
    eval_policies = check_eval_policies(eval_policies)
    agent_class = agent_class or _agent_class(agent_config)
    obs_dim, action_dim = getattr(agent_config, "obs_dim", None), getattr(agent_config, "action_dim", None)
    if obs_dim != env.obs_dim or action_dim != env.action_dim:
        raise ValueError(f"make_loop: the agent config is for obs_dim={obs_dim}, action_dim={action_dim}; the env "
                         f"{type(env).__name__} has obs_dim={env.obs_dim}, action_dim={env.action_dim}")
    if mesh is not None:
        if "data" not in mesh.axis_names:
            raise ValueError(f"make_loop: mesh needs a 'data' axis, has {mesh.axis_names}")
        devices = mesh.shape["data"]
        for name in ("num_envs", "batch_size", "eval_episodes"):
            if getattr(config, name) % devices:
                raise ValueError(f"make_loop: DeviceLoopConfig.{name}={getattr(config, name)} must be a multiple of "
                                 f"the mesh's {devices} devices on its 'data' axis")
    return DeviceLoop(agent_class, agent_config, env, config, mesh, eval_policies)


def make_train(agent_config, env: jax_env.GoalEnv, config: DeviceLoopConfig, agent_class=None,
               mesh=None, eval_policies=None) -> Callable[[jax.Array], tuple[Any, dict]]:
    """``train(key) -> (agent, metrics)``: the whole run as one pure function (jit it; vmap it over keys for
    seeds). ``metrics`` holds one entry per iteration (``eval_success``, ``eval_success_<name>`` of
    ``eval_policies`` and ``explore_success`` are NaN where nothing was evaluated or no episode ended)."""
    return make_loop(agent_config, env, config, agent_class, mesh, eval_policies).train


# ------------------------------------------------------------------------------- host-driven runs


def train_on_device(agent_config, env: jax_env.GoalEnv, config: DeviceLoopConfig, seed: int | tuple[int, ...] = 0,
                    run_dir: str | Path | None = None, resume: bool = True, overwrite: bool = False,
                    desc: str = "device loop", agent_class=None, mesh=None,
                    eval_policies=None) -> tuple[Any, list[dict]]:
    """The device loop in compiled chunks of ``config.chunk_iterations`` iterations, with a progress bar in env
    steps, metrics rows (one per iteration) and, with ``run_dir``, checkpoints of the whole
    :class:`LoopState` every ``checkpoint_every`` chunks; a resumed run continues exactly (it equals an
    uninterrupted one). Returns ``(agent, rows)``. Raises :class:`~platonic_rl.training.updates.NonFiniteError`
    at the first iteration with a NaN or infinity, before saving it (its checkpoints stay the last good state).

    ``seed`` a tuple: those seeds in one vmapped program (the agent's leaves gain a leading seed axis); rows hold
    each metric's mean over seeds and ``eval_success/<seed>`` (and ``eval_success_<name>/<seed>`` for each of
    ``eval_policies``) per seed. A single-seed run may be continued with
    a larger ``iterations`` (its buffer grows); a vmapped one resumes with the same budget."""
    loop = make_loop(agent_config, env, config, agent_class, mesh, eval_policies)
    extra = dict(env=env_settings(env), **(dict(eval_policies=describe(loop.eval_policies)) if loop.eval_policies
                                          else {}))
    return drive(loop, seed, run_dir, resume, overwrite, desc, extra, resumable=budget_paths(config, "loop"),
                 total_env_steps=config.env_steps(env))


def drive(loop, seed: int | tuple[int, ...], run_dir: str | Path | None, resume: bool, overwrite: bool, desc: str,
          settings: dict, resumable: tuple[str, ...], total_env_steps: int, headline: str = "eval_success"
          ) -> tuple[Any, list[dict]]:
    """The host's side of a device loop (this module's and :mod:`~platonic_rl.training.world_model_device`'s):
    ``loop.jitted(vmapped)``'s ``init`` and ``run`` for ``loop.iterations`` iterations in chunks of
    ``loop.config.chunk_iterations``, a
    progress bar in env steps, one metrics row per iteration (per seed ``<metric>/<seed>`` for every metric named
    ``eval_*``), checkpoints of the whole state every ``checkpoint_every`` chunks in ``run_dir`` (its settings: the
    agent's, the seeds, the loop's recorded fields and ``settings``), exact resume, and a
    :class:`~platonic_rl.training.updates.NonFiniteError` at the first iteration with a NaN or infinity, before it is
    saved. A single-seed run resumes with a larger budget (the settings paths ``resumable``, the loop config's
    budget fields: :func:`~platonic_rl.common.settings.budget_paths`; its buffer grows)."""
    config, iterations = loop.config, loop.iterations
    seeds = tuple(int(s) for s in seed) if isinstance(seed, (tuple, list)) else None
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise ValueError(f"seed: seeds must be distinct ints, got {seed}")
    init, run_chunk = loop.jitted(vmapped=seeds is not None)
    state = init(jax.random.PRNGKey(seed) if seeds is None else jnp.stack([jax.random.PRNGKey(s) for s in seeds]))
    check_agent(state.agent)
    state_type = type(state)
    recorded = None
    if run_dir is not None:
        recorded = dict(**agent_settings(state.agent), seed=list(seeds) if seeds else seed,
                        loop=recorded_fields(config, HOST),  # host settings change neither program nor results
                        **settings)
    with LoopRun.start(_as_dict(state), budget=iterations, run_dir=run_dir, settings=recorded, resume=resume,
                       overwrite=overwrite, resumable=resumable if seeds is None else (),
                       step_key="iteration", resize_buffer=seeds is None, desc=desc, total=total_env_steps,
                       position=lambda s: int(np.max(s["env_steps"]))) as driver:
        state, bar = state_type(**driver.state), driver.bar
        chunks_done = 0
        while int(np.max(state.iteration)) < iterations:
            first = int(np.max(state.iteration))
            n = min(config.chunk_iterations, iterations - first)
            new_state, metrics = run_chunk(state, n)
            metrics = jax.device_get(metrics)
            if seeds is not None:  # [seeds, n] -> [n, seeds]
                metrics = {k: np.swapaxes(v, 0, 1) for k, v in metrics.items()}
            finite = {k[len("finite/"):]: np.all(v.reshape(n, -1), axis=1) for k, v in metrics.items()
                      if k.startswith("finite/")}  # per iteration, over seeds
            check_finite(finite, first_step=first + 1, unit="iteration")
            state, chunks_done = new_state, chunks_done + 1
            for i in range(n):
                row = {"iteration": first + i + 1}
                for k, v in metrics.items():
                    if k.startswith("finite/") or np.all(np.isnan(v[i])):
                        continue
                    row[k] = float(np.mean(v[i]))
                    if seeds is not None and k.startswith("eval_"):
                        row.update({f"{k}/{s}": float(x) for s, x in zip(seeds, v[i])})
                row["env_steps"] = int(np.max(metrics["env_steps"][i]))
                last = first + i + 1 == iterations
                driver.finish_row(row, first + i + 1, _as_dict(state),
                                  due=i == n - 1 and checkpoint_due(chunks_done, config.checkpoint_every, last),
                                  at_step=i == n - 1)
            bar.update(int(np.max(state.env_steps)) - bar.n)
            evals = [r[headline] for r in driver.history if headline in r]
            if evals:
                bar.set_postfix({headline: f"{evals[-1]:.2f}"})
    return state.agent, driver.history


def _compile(loop: IteratedLoop, vmapped: bool):
    if vmapped:
        return (jax.jit(jax.vmap(loop.init)),
                jax.jit(lambda s, n: jax.vmap(lambda x, done: loop.run(x, n, done), in_axes=(0, None))(
                    s, s.iteration[0]), static_argnums=1))  # seeds in lockstep: one unbatched count
    return jax.jit(loop.init), jax.jit(loop.run, static_argnums=1)


_compile_cached = functools.lru_cache(maxsize=4)(_compile)


def env_settings(env) -> dict:
    """An env's name and fields, nested envs (wrappers) included, as JSON-able settings (an env with a
    ``settings()`` method, as :class:`~platonic_rl.envs.brax_env.BraxGoalEnv`, describes itself)."""
    if callable(getattr(env, "settings", None)):
        return env.settings()
    if not dataclasses.is_dataclass(env):
        return dict(name=type(env).__name__)
    fields = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}
    return dict(name=type(env).__name__, **{k: env_settings(v) if isinstance(v, jax_env.GoalEnv) else v
                                            for k, v in fields.items()})
