"""One online goal-conditioned training loop for every agent (QRL, CRL, GCBC, DDPG+HER) on Fetch.

Schedule (dissertation C.3.3): prefill the replay buffer with ``prefill_episodes`` random episodes, then
repeat cycles of ``rollouts_per_cycle`` exploration episodes (the agent's action plus N(0, noise^2),
clipped) and ``updates_per_cycle`` gradient steps; evaluate ``eval_episodes`` deterministic episodes on
the env's own goals every ``eval_every`` env steps (success = goal reached at any step).

The gradient steps of a cycle are one jitted ``lax.scan`` (or several, ``updates_per_call`` steps each:
see that field for conv agents on CPU): each step samples the on-device replay buffer
(goals = future states relabelled with P(k) ~ discount^k, mapped to goal states by zeroing non-goal
dimensions; rewards -1 per step) and calls ``agent.update``. With ``obs="image"`` the agent sees 64x64
RGB frames and goal images (:class:`platonic_rl.envs.fetch.ImageRenderer`), the buffer stores uint8 frames, and goals
are future frames (no dimension masking). Any agent with ``update(batch)`` and
``act(obs, goals, rng)`` works. Logs ``metrics.csv``/``metrics.jsonl``; orbax checkpoints hold the agent,
the replay buffer and the loop's counters and keys, so a resumed run continues exactly.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from tqdm import tqdm

from platonic_rl.envs import fetch
from platonic_rl.envs.replay import EpisodeBuffer
from platonic_rl.qrl.train import close_online_run, open_online_run


@dataclasses.dataclass(frozen=True)
class OnlineConfig:
    task: str = "reach"
    obs: str = "state"               # "state" | "image" (64x64 RGB frames and goal images)
    env_steps: int = 20_000          # total budget, prefill included
    prefill_episodes: int = 200
    rollouts_per_cycle: int = 10
    updates_per_cycle: int = 500     # 125 for image observations
    batch_size: int = 256
    exploration_noise: float = 0.3
    eval_every: int = 2_000          # env steps
    eval_episodes: int = 50
    p_future: float = 1.0            # else a random buffer state as the goal
    discount: float = 0.99           # of the future-goal offset distribution
    seed: int = 0
    checkpoint_every: int = 10       # cycles; 0 disables
    resume: bool = True
    buffer_episodes: int | None = None  # replay capacity; None: everything the budget can collect
    updates_per_call: int | None = None
    """Gradient steps per compiled call (a divisor of updates_per_cycle); None: the whole cycle in one call,
    except for images on the CPU backend: one call per step, because XLA:CPU runs convolutions inside a loop
    body ~7x slower than outside (jax-ml/jax#12868; 4.7 s vs 0.67 s per image-QRL update here)."""

    def __post_init__(self):
        if self.task not in fetch.TASKS:
            raise ValueError(f"OnlineConfig.task must be one of {sorted(fetch.TASKS)}, got {self.task!r}")
        if self.obs not in ("state", "image"):
            raise ValueError(f"OnlineConfig.obs must be 'state' or 'image', got {self.obs!r}")
        for name in ("env_steps", "prefill_episodes", "rollouts_per_cycle", "updates_per_cycle", "batch_size",
                     "eval_every", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"OnlineConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.updates_per_call is not None and (self.updates_per_call < 1
                                                  or self.updates_per_cycle % self.updates_per_call):
            raise ValueError(f"OnlineConfig.updates_per_call must be a positive divisor of updates_per_cycle="
                             f"{self.updates_per_cycle} (or None), got {self.updates_per_call}")

    def check_budget(self) -> None:
        """Raise ``ValueError`` unless ``env_steps`` exceeds the random prefill (else :func:`train_online` would
        prefill, then stop without one training cycle or evaluation). Called by :func:`train_online` before
        anything runs; not in ``__post_init__``, so that configs of runs only read back (reports from logs)
        stay constructible."""
        if self.env_steps <= self.prefill_env_steps:
            raise ValueError(f"OnlineConfig.env_steps={self.env_steps} must be greater than the random prefill of "
                             f"{self.prefill_env_steps} env steps (prefill_episodes={self.prefill_episodes}, in "
                             f"batches of rollouts_per_cycle={self.rollouts_per_cycle} episodes of "
                             f"{fetch.EPISODE_LENGTH} steps), else no training cycle or evaluation runs")

    @property
    def prefill_env_steps(self) -> int:
        """Env steps the random prefill takes: ``prefill_episodes`` rounded up to whole batches of
        ``rollouts_per_cycle`` episodes (one per env of the vector env), ``fetch.EPISODE_LENGTH`` steps each."""
        batches = math.ceil(self.prefill_episodes / self.rollouts_per_cycle)
        return batches * self.rollouts_per_cycle * fetch.EPISODE_LENGTH

    @property
    def episode_capacity(self) -> int:
        if self.buffer_episodes is not None:
            return self.buffer_episodes
        return self.prefill_episodes + math.ceil(self.env_steps / fetch.EPISODE_LENGTH) + self.rollouts_per_cycle


@functools.partial(jax.jit, static_argnames=("batch_size", "p_future", "discount"))
def train_steps(agent, buffer: EpisodeBuffer, keys, goal_mask, batch_size: int, p_future: float, discount: float):
    """One gradient step per key in ``keys [n, 2]`` on batches from ``buffer``, in one compiled call (a
    ``lax.scan``); returns the agent and the metrics averaged over the ``n`` steps."""
    def step(agent, key):
        s = buffer.sample(key, batch_size, p_future, discount)
        batch = dict(observations=s["observations"], actions=s["actions"],
                     next_observations=s["next_observations"],
                     goals=s["goals"] if goal_mask is None else s["goals"] * goal_mask,
                     rewards=-jnp.ones(batch_size, jnp.float32))
        return agent.update(batch)

    if keys.shape[0] == 1:  # no loop at all: even a one-trip or unrolled scan stays a while loop in XLA
        return step(agent, keys[0])
    agent, metrics = jax.lax.scan(step, agent, keys)
    return agent, jax.tree.map(jnp.mean, metrics)


def train_cycle(agent, buffer: EpisodeBuffer, key, goal_mask, config: "OnlineConfig"):
    """The cycle's ``config.updates_per_cycle`` gradient steps, ``config.updates_per_call`` per compiled call
    (see that field for the default); the metrics are averaged over all steps. The steps and their batches do not
    depend on how they are split into calls."""
    keys = jax.random.split(key, config.updates_per_cycle)
    per_call = config.updates_per_call or (
        1 if config.obs == "image" and jax.default_backend() == "cpu" else config.updates_per_cycle)
    metrics = []
    for chunk in jnp.split(keys, config.updates_per_cycle // per_call):
        agent, chunk_metrics = train_steps(agent, buffer, chunk, goal_mask, config.batch_size, config.p_future,
                                           config.discount)
        metrics.append(chunk_metrics)
    return agent, jax.tree.map(lambda *m: jnp.mean(jnp.stack(m)), *metrics)


@functools.partial(jax.jit, static_argnames=("noise",))
def _explore(agent, observations, goals, key, noise: float):
    policy_key, noise_key = jax.random.split(key)
    actions = agent.act(observations, goals, policy_key)
    return jnp.clip(actions + noise * jax.random.normal(noise_key, actions.shape), -1.0, 1.0)


_greedy = jax.jit(lambda agent, observations, goals: agent.act(observations, goals))


def eval_seed(env_steps: int) -> int:
    """Seed of the evaluation at ``env_steps``: every agent (and the zero-action reference of
    :mod:`platonic_rl.benchmarks.fetch`) is evaluated on the same initial states and goals at the same step."""
    return 10_000_000 + int(env_steps)


def evaluate(policy, env, task: str, episodes: int, seed: int, renderer=None) -> float:
    """Success rate of ``policy(obs, goals) -> actions`` over ``episodes`` episodes (in batches of env's size)."""
    if episodes < 1:
        raise ValueError(f"evaluate: episodes must be >= 1, got {episodes}")
    successes = []
    for i in range(math.ceil(episodes / env.num_envs)):
        out = fetch.rollout(env, task, policy, seed=seed + i, renderer=renderer)
        successes.append(out["success"])
    return float(np.concatenate(successes)[:episodes].mean())


def train_online(agent, config: OnlineConfig, run_dir: str | Path | None = None, desc: str = "online"):
    """Train ``agent`` online on Fetch ``config.task``. Returns ``(agent, history)``; ``history`` is the
    list of logged rows (env_steps, mean update metrics, eval_success where evaluated, the cycle's wall-clock
    cycle_seconds), including those of earlier invocations of a resumed run."""
    config.check_budget()
    spec = fetch.TASKS[config.task]
    env = fetch.make_vector_env(config.task, config.rollouts_per_cycle)
    eval_env = fetch.make_vector_env(config.task, min(config.eval_episodes, 10))
    image = config.obs == "image"
    renderer = fetch.ImageRenderer(env, config.task) if image else None
    eval_renderer = fetch.ImageRenderer(eval_env, config.task) if image else None
    if image:  # goals are whole future frames
        goal_mask = None
        buffer = EpisodeBuffer.create(config.episode_capacity, fetch.EPISODE_LENGTH,
                                      (fetch.IMAGE_SIZE, fetch.IMAGE_SIZE, 3), fetch.ACTION_DIM, jnp.uint8)
    else:
        goal_mask = jnp.asarray(fetch.state_to_goal(config.task, np.ones(spec.obs_dim, np.float32)))
        buffer = EpisodeBuffer.create(config.episode_capacity, fetch.EPISODE_LENGTH, spec.obs_dim, fetch.ACTION_DIM)
    key = jax.random.PRNGKey(config.seed)
    state = dict(agent=agent, buffer=buffer, key=key, env_steps=jnp.int32(0), cycle=jnp.int32(0))
    manager, log, state = open_online_run(run_dir, state, config.resume)
    history = list(log.rows) if log else []

    def collect(state, policy, seed):
        out = fetch.rollout(env, config.task, policy, seed=seed, renderer=renderer)
        stored = out["images"] if image else out["observations"]
        state["buffer"] = state["buffer"].add(jnp.asarray(stored), jnp.asarray(out["actions"]))
        state["env_steps"] = state["env_steps"] + out["actions"].shape[0] * fetch.EPISODE_LENGTH
        return float(out["success"].mean())

    bar = tqdm(total=config.env_steps, initial=int(state["env_steps"]), desc=desc, unit="step")
    random_policy = np.random.default_rng(config.seed)
    while int(state["buffer"].size) < config.prefill_episodes and int(state["env_steps"]) < config.env_steps:
        before = int(state["env_steps"])
        collect(state, lambda o, g: random_policy.uniform(-1, 1, (len(o), fetch.ACTION_DIM)),
                seed=config.seed * 1_000_003 + int(state["buffer"].size))
        bar.update(int(state["env_steps"]) - before)
    next_eval = (int(state["env_steps"]) // config.eval_every + 1) * config.eval_every
    while int(state["env_steps"]) < config.env_steps:
        cycle, cycle_start = int(state["cycle"]), time.perf_counter()
        key, act_key, train_key = jax.random.split(state["key"], 3)
        act_keys = iter(jax.random.split(act_key, fetch.EPISODE_LENGTH))
        before = int(state["env_steps"])
        explore_success = collect(
            state, lambda o, g: np.asarray(_explore(state["agent"], o, g, next(act_keys), config.exploration_noise)),
            seed=config.seed * 1_000_003 + 500_000 + cycle)
        state["agent"], metrics = train_cycle(state["agent"], state["buffer"], train_key, goal_mask, config)
        state["key"], state["cycle"] = key, jnp.int32(cycle + 1)
        row = {"env_steps": int(state["env_steps"]), "cycle": cycle + 1, "explore_success": explore_success,
               **{k: float(v) for k, v in metrics.items()}}
        if int(state["env_steps"]) >= next_eval or int(state["env_steps"]) >= config.env_steps:
            greedy = lambda o, g: np.asarray(_greedy(state["agent"], o, g))  # noqa: E731
            row["eval_success"] = evaluate(greedy, eval_env, config.task, config.eval_episodes,
                                           seed=eval_seed(state["env_steps"]), renderer=eval_renderer)
            next_eval += config.eval_every
            bar.set_postfix(success=f"{row['eval_success']:.2f}")
        row["cycle_seconds"] = time.perf_counter() - cycle_start  # rollouts + updates + evaluation, wall clock
        history.append(row)
        bar.update(int(state["env_steps"]) - before)
        if log:
            log.append(row)
            if manager and config.checkpoint_every and ((cycle + 1) % config.checkpoint_every == 0
                                                         or int(state["env_steps"]) >= config.env_steps):
                manager.save(int(state["env_steps"]), args=ocp.args.StandardSave(state))
    bar.close()
    close_online_run(manager, log)
    for r in (renderer, eval_renderer):
        if r is not None:
            r.close()
    env.close()
    eval_env.close()
    return state["agent"], history

