"""One online goal-conditioned training loop for every agent (QRL, CRL, GCBC, DDPG+HER) on host-stepped
gymnasium goal envs: Fetch by task name, any gymnasium goal env by id (e.g. ``PointMaze_UMaze-v3``), or your
own through ``make_env`` -- all seen through :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter`.

Schedule (dissertation C.3.3): prefill the replay buffer with ``prefill_episodes`` random episodes, then
repeat cycles of ``rollouts_per_cycle`` exploration episodes (the agent's action plus N(0, noise^2),
clipped) and ``updates_per_cycle`` gradient steps; evaluate ``eval_episodes`` deterministic episodes on
the env's own goals every ``eval_every`` env steps (success = goal reached at any step).

The gradient steps of a cycle are :func:`~platonic_rl.training.updates.update_steps` calls (one, or several of
``updates_per_call`` steps: see that field for conv agents on CPU) on a
:class:`~platonic_rl.envs.replay.GoalSampler` of the on-device replay buffer (goals = future states relabelled
with P(k) ~ discount^k, mapped to goal states by zeroing non-goal dimensions; rewards -1 per step). With ``obs="image"`` the agent sees 64x64
RGB frames and goal images (:class:`platonic_rl.envs.fetch.ImageRenderer`), the buffer stores uint8 frames, and goals
are future frames (no dimension masking). Any agent of the contract
(:mod:`platonic_rl.agents.contract`) works. The run directory (:class:`~platonic_rl.training.run.RunDirectory`)
holds the settings, the metrics and orbax checkpoints of the agent, the replay buffer and the loop's
counters and keys, so a resumed run continues exactly.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.common.policies import explore, start_episodes
from platonic_rl.common.settings import BUDGET, HOST, budget, budget_paths, host_setting, recorded_fields
from platonic_rl.agents.contract import check_agent, host_policy
from platonic_rl.envs import fetch
from platonic_rl.envs.goal_env import GoalEnvAdapter, make_gymnasium_vector_env
from platonic_rl.envs.replay import EpisodeBuffer, GoalSampler
from platonic_rl.training.evaluation import build_policy, check_eval_policies, describe, metric_name
from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import agent_settings
from platonic_rl.training.schedule import (EXPLORATION_STREAM, EvaluationSchedule, checkpoint_due, episode_seed,
                                           episode_seeds, eval_seed)
from platonic_rl.training.updates import update_in_calls, updates_per_call


@dataclasses.dataclass(frozen=True)
class OnlineConfig:
    task: str = "reach"
    """A Fetch task ("reach", "push", "slide"), a registered gymnasium goal env id, or a name for the env
    that ``make_env`` builds."""
    obs: str = "state"               # "state" | "image" (64x64 RGB frames and goal images)
    env_steps: int = budget(20_000)  # total budget, prefill included
    prefill_episodes: int = 200      # random-action episodes first
    rollouts_per_cycle: int = 10     # episodes collected per cycle (one vector env of this many)
    updates_per_cycle: int = 500     # gradient steps per cycle; 125 for image observations
    batch_size: int = 256            # transitions per gradient step
    exploration_noise: float = 0.3   # std of the Gaussian noise added to the agent's actions while collecting
    eval_every: int = 2_000          # env steps
    eval_episodes: int = 50          # deterministic episodes per evaluation, seeded by the env step
    eval_policies_after: int = 0     # env steps: the evaluation policies act only at evaluations after this many
    #                                  (a policy may cost many times the agent's episodes: e.g. the last few only)
    p_future: float = 1.0            # share of goals drawn from the same episode's future, else a random buffer state
    discount: float = 0.99           # of the future-goal offset distribution
    seed: int = 0                    # the envs', the replay sampler's and the exploration's seed
    checkpoint_every: int = host_setting(10)  # cycles; 0 disables
    resume: bool = host_setting(True)  # continue from run_dir's latest checkpoint (refused if settings differ)
    buffer_episodes: int | None = budget(None)  # replay capacity; None: everything the budget can collect
    overwrite: bool = host_setting(False)  # clear run_dir first (a fresh run into a used directory is refused)
    episode_length: int | None = None  # None: the env's (Fetch: 50; else its spec's max_episode_steps)
    updates_per_call: int | None = host_setting(None)
    """Gradient steps per compiled call (a divisor of updates_per_cycle); None: the whole cycle in one call,
    except for images on the CPU backend: one call per step, because XLA:CPU runs convolutions inside a loop
    body ~7x slower than outside (jax-ml/jax#12868; 4.7 s vs 0.67 s per image-QRL update here)."""

    def __post_init__(self):
        if not isinstance(self.task, str) or not self.task:
            raise ValueError(f"OnlineConfig.task must name a Fetch task {sorted(fetch.TASKS)} or a gymnasium goal "
                             f"env, got {self.task!r}")
        if self.obs not in ("state", "image"):
            raise ValueError(f"OnlineConfig.obs must be 'state' or 'image', got {self.obs!r}")
        if self.obs == "image" and self.task not in fetch.TASKS:
            raise ValueError(f"OnlineConfig.obs='image' is implemented for the Fetch tasks {sorted(fetch.TASKS)}, "
                             f"not {self.task!r}")
        if self.episode_length is not None and self.episode_length < 1:
            raise ValueError(f"OnlineConfig.episode_length must be >= 1 or None, got {self.episode_length}")
        for name in ("env_steps", "prefill_episodes", "rollouts_per_cycle", "updates_per_cycle", "batch_size",
                     "eval_every", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"OnlineConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_policies_after < 0:
            raise ValueError(f"OnlineConfig.eval_policies_after must be >= 0, got {self.eval_policies_after}")
        if self.updates_per_call is not None and (self.updates_per_call < 1
                                                  or self.updates_per_cycle % self.updates_per_call):
            raise ValueError(f"OnlineConfig.updates_per_call must be a positive divisor of updates_per_cycle="
                             f"{self.updates_per_cycle} (or None), got {self.updates_per_call}")

    def check_budget(self) -> None:
        """Raise ``ValueError`` unless ``env_steps`` is the random prefill plus a whole number (>= 1) of cycles (with
        no cycle, :func:`train_online` would prefill and stop without training; with a part of one, the last cycle
        would run past the budget). Called by :func:`train_online` before
        anything runs; not in ``__post_init__``, so that configs of runs only read back (reports from logs)
        stay constructible."""
        if self.env_steps <= self.prefill_env_steps:
            raise ValueError(f"OnlineConfig.env_steps={self.env_steps} must be greater than the random prefill of "
                             f"{self.prefill_env_steps} env steps (prefill_episodes={self.prefill_episodes}, in "
                             f"batches of rollouts_per_cycle={self.rollouts_per_cycle} episodes of "
                             f"{self.steps_per_episode} steps), else no training cycle or evaluation runs")
        cycle = self.rollouts_per_cycle * self.steps_per_episode
        extra = (self.env_steps - self.prefill_env_steps) % cycle
        if extra:
            below = self.env_steps - extra
            options = [n for n in (below, below + cycle) if n > self.prefill_env_steps]
            raise ValueError(f"OnlineConfig.env_steps={self.env_steps} is not the random prefill "
                             f"({self.prefill_env_steps} env steps) plus a whole number of cycles of {cycle} env steps "
                             f"(rollouts_per_cycle={self.rollouts_per_cycle} episodes of {self.steps_per_episode} "
                             f"steps): the last cycle would run past the budget; use "
                             f"env_steps={' or '.join(map(str, options))}")

    @property
    def prefill_env_steps(self) -> int:
        """Env steps the random prefill takes: ``prefill_episodes`` rounded up to whole batches of
        ``rollouts_per_cycle`` episodes (one per env of the vector env), ``steps_per_episode`` steps each."""
        batches = math.ceil(self.prefill_episodes / self.rollouts_per_cycle)
        return batches * self.rollouts_per_cycle * self.steps_per_episode

    @property
    def steps_per_episode(self) -> int:
        """``episode_length``, or Fetch's 50 for a Fetch task (else it is known once the env is made)."""
        if self.episode_length is not None:
            return self.episode_length
        if self.task in fetch.TASKS:
            return fetch.EPISODE_LENGTH
        raise ValueError(f"OnlineConfig.episode_length of {self.task!r} is not known before its env is made")

    @property
    def episode_capacity(self) -> int:
        if self.buffer_episodes is not None:
            return self.buffer_episodes
        return self.prefill_episodes + math.ceil(self.env_steps / self.steps_per_episode) + self.rollouts_per_cycle


def train_cycle(agent, buffer: EpisodeBuffer, key, goal_mask, config: "OnlineConfig", first_step: int = 1):
    """The cycle's ``config.updates_per_cycle`` gradient steps, ``config.updates_per_call`` per compiled call
    (see that field for the default); the metrics are averaged over all steps. The steps and their batches do not
    depend on how they are split into calls. Raises NonFiniteError (naming the update, counted from
    ``first_step``) if anything became NaN or infinite."""
    keys = jax.random.split(key, config.updates_per_cycle)
    per_call = updates_per_call(config.updates_per_call, config.updates_per_cycle, convolutions=config.obs == "image")
    sampler = GoalSampler(buffer, goal_mask, config.batch_size, config.p_future, config.discount)
    return update_in_calls(agent, sampler, keys, per_call, first_step)


def evaluate(policy, env: GoalEnvAdapter, episodes: int, seed: int, renderer=None) -> float:
    """Success rate of ``policy(obs, goals) -> actions`` over ``episodes`` episodes, run in batches of ``env``'s
    size (a :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter`; for your own vector env, wrap it first). Every
    episode resets with its own seed (:func:`~platonic_rl.training.schedule.episode_seeds` of ``seed``), so the
    episodes of one evaluation are all different, and those of evaluations with other seeds too; the same
    ``seed`` gives the same episodes, whatever the policy."""
    return evaluate_rates(policy, env, episodes, seed, renderer)["success"]


def evaluate_rates(policy, env: GoalEnvAdapter, episodes: int, seed: int, renderer=None) -> dict[str, float]:
    """:func:`evaluate`'s episodes, two rates: ``success`` (the goal reached at any step) and ``at_goal_at_end``
    (the env's success at the episode's last step: a policy that arrives and stays)."""
    if episodes < 1:
        raise ValueError(f"evaluate: episodes must be >= 1, got {episodes}")
    batches = math.ceil(episodes / env.num_envs)
    seeds = episode_seeds(seed, batches * env.num_envs)
    successes, at_end = [], []
    for i in range(batches):
        start_episodes(policy)
        out = env.rollout(policy, seed=seeds[i * env.num_envs:(i + 1) * env.num_envs], renderer=renderer)
        successes.append(out["success"])
        at_end.append(out["final_success"])
    return dict(success=float(np.concatenate(successes)[:episodes].mean()),
                at_goal_at_end=float(np.concatenate(at_end)[:episodes].mean()))


def make_goal_env(task: str, num_envs: int) -> GoalEnvAdapter:
    """A Fetch task by name, else the gymnasium goal env registered as ``task``, as a vector env of
    ``num_envs`` seen through goal states."""
    if task in fetch.TASKS:
        return fetch.adapter(fetch.make_vector_env(task, num_envs), task)
    return GoalEnvAdapter(make_gymnasium_vector_env(task, num_envs))


# How episodes are seeded, saved with every run: a run directory saved when one int seeded all sub-envs of a batch
# (so consecutive batches replayed each other's episodes) lacks it, and is refused rather than resumed differently.
EPISODE_SEEDS = "one reset seed per episode"

def train_online(agent, config: OnlineConfig, run_dir: str | Path | None = None, desc: str = "online",
                 make_env: Callable[[int], object] | None = None,
                 eval_policies: Mapping[str, Callable] | None = None):
    """Train ``agent`` online on ``config.task``. Returns ``(agent, history)``; ``history`` is the list of
    logged rows (env_steps, mean update metrics, eval_success where evaluated, the cycle's wall-clock
    cycle_seconds), including those of earlier invocations of a resumed run.

    ``make_env(num_envs)``: your own env, a gymnasium vector env of goal envs (dict observations
    ``observation`` / ``achieved_goal`` / ``desired_goal``, ``info["is_success"]``, fixed-length episodes),
    wrapped in :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter` -- or that adapter itself, e.g. to give
    ``goal_dims``; default: :func:`make_goal_env`.

    ``eval_policies``: ``{name: build(agent) -> policy}``, policies evaluated on the same episodes as the agent at
    every evaluation, logged as ``eval_success_<name>`` (:mod:`platonic_rl.training.evaluation`)."""
    if config.episode_length is not None or config.task in fetch.TASKS:
        config.check_budget()  # before any env is made (else once the env tells its episode length)
    check_agent(agent)
    eval_policies = check_eval_policies(eval_policies)
    image = config.obs == "image"
    def build(num_envs: int) -> GoalEnvAdapter:
        if make_env is None:
            return make_goal_env(config.task, num_envs)
        env = make_env(num_envs)  # a vector goal env, or one already wrapped (e.g. with its goal_dims)
        return env if isinstance(env, GoalEnvAdapter) else GoalEnvAdapter(env, episode_length=config.episode_length)

    env, eval_env = build(config.rollouts_per_cycle), build(min(config.eval_episodes, 10))
    renderer = eval_renderer = None
    try:  # whatever stops the run (a refusal, an error), the envs and the run directory are closed
        if config.episode_length is None:
            config = dataclasses.replace(config, episode_length=env.episode_length)
        elif config.episode_length != env.episode_length:
            env.episode_length = eval_env.episode_length = config.episode_length
        config.check_budget()
        length = config.episode_length
        renderer = fetch.ImageRenderer(env.env, config.task) if image else None
        eval_renderer = fetch.ImageRenderer(eval_env.env, config.task) if image else None
        if image:  # goals are whole future frames
            goal_mask = None
            buffer = EpisodeBuffer.create(config.episode_capacity, length, (fetch.IMAGE_SIZE, fetch.IMAGE_SIZE, 3),
                                          env.action_dim, jnp.uint8)
        else:
            goal_mask = jnp.asarray(env.goal_mask)
            buffer = EpisodeBuffer.create(config.episode_capacity, length, env.obs_dim, env.action_dim)
        key = jax.random.PRNGKey(config.seed)
        state = dict(agent=agent, buffer=buffer, key=key, env_steps=jnp.int32(0), cycle=jnp.int32(0))
        settings = None
        if run_dir is not None:
            recorded = recorded_fields(config, BUDGET, HOST, keep=("env_steps",))  # the budget, which may grow
            settings = dict(**agent_settings(agent), loop=recorded, episode_seeds=EPISODE_SEEDS,
                            **(dict(eval_policies=describe(eval_policies)) if eval_policies else {}),
                            env=dict(goal_dims=list(env.goal_dims), obs_dim=env.obs_dim, action_dim=env.action_dim))
        with LoopRun.start(state, budget=config.env_steps, run_dir=run_dir, settings=settings, resume=config.resume,
                           overwrite=config.overwrite, resumable=budget_paths(config, "loop"), step_key="env_steps",
                           resize_buffer=True, desc=desc, position=lambda s: int(s["env_steps"])) as loop:
            state, bar = loop.state, loop.bar

            def batch_seeds(first: int, stream: int = 0) -> list[int]:
                """One reset seed per sub-env: episodes first, first + 1, ... of ``stream``, each its own."""
                return [episode_seed(config.seed, first + j, stream) for j in range(env.num_envs)]

            def collect(state, policy, seed):
                out = env.rollout(policy, seed=seed, renderer=renderer)
                stored = out["images"] if image else out["observations"]
                state["buffer"] = state["buffer"].add(jnp.asarray(stored), jnp.asarray(out["actions"]))
                state["env_steps"] = state["env_steps"] + out["actions"].shape[0] * length
                return float(out["success"].mean())

            random_policy = np.random.default_rng(config.seed)
            while int(state["buffer"].size) < config.prefill_episodes and int(state["env_steps"]) < config.env_steps:
                before = int(state["env_steps"])
                collect(state, lambda o, g: random_policy.uniform(-1, 1, (len(o), env.action_dim)),
                        seed=batch_seeds(int(state["buffer"].size)))
                bar.update(int(state["env_steps"]) - before)
            evaluations = EvaluationSchedule(config.eval_every, int(state["env_steps"]))
            while int(state["env_steps"]) < config.env_steps:
                cycle, cycle_start = int(state["cycle"]), time.perf_counter()
                key, act_key, train_key = jax.random.split(state["key"], 3)
                act_keys = iter(jax.random.split(act_key, length))
                before = int(state["env_steps"])
                explore_success = collect(
                    state, lambda o, g: np.asarray(explore(state["agent"], o, g, next(act_keys),
                                                           config.exploration_noise)),
                    seed=batch_seeds(cycle * env.num_envs, EXPLORATION_STREAM))
                state["agent"], metrics = train_cycle(state["agent"], state["buffer"], train_key, goal_mask, config,
                                                      first_step=cycle * config.updates_per_cycle + 1)
                state["key"], state["cycle"] = key, jnp.int32(cycle + 1)
                row = {"env_steps": int(state["env_steps"]), "cycle": cycle + 1, "explore_success": explore_success,
                       **{k: float(v) for k, v in metrics.items()}}
                if evaluations.due(int(state["env_steps"]), final=int(state["env_steps"]) >= config.env_steps):
                    row["eval_success"] = evaluate(host_policy(state["agent"]), eval_env, config.eval_episodes,
                                                   seed=eval_seed(state["env_steps"]), renderer=eval_renderer)
                    policies_start = time.perf_counter()
                    states_key = jax.random.fold_in(jax.random.PRNGKey(config.seed), int(state["env_steps"]))
                    due = eval_policies if int(state["env_steps"]) > config.eval_policies_after else ()
                    for name, build in due:  # the same episodes
                        policy = build_policy(build, state["agent"], state["buffer"], states_key)
                        row[metric_name(name)] = evaluate(host_policy(policy), eval_env,
                                                          config.eval_episodes, seed=eval_seed(state["env_steps"]),
                                                          renderer=eval_renderer)
                    if due:  # part of cycle_seconds, kept apart so that training times compare
                        row["eval_policies_seconds"] = time.perf_counter() - policies_start
                    bar.set_postfix(success=f"{row['eval_success']:.2f}")
                row["cycle_seconds"] = time.perf_counter() - cycle_start  # rollouts, updates, evaluation: wall clock
                bar.update(int(state["env_steps"]) - before)
                final = int(state["env_steps"]) >= config.env_steps
                loop.finish_row(row, int(state["env_steps"]), state,
                                due=checkpoint_due(cycle + 1, config.checkpoint_every, final))
    finally:
        try:
            for r in (renderer, eval_renderer):
                if r is not None:
                    r.close()
        finally:
            env.close()
            eval_env.close()
    return state["agent"], loop.history
