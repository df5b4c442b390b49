"""The online loop of Algorithm 1 (Denoised MDP / Dreamer) on DeepMind Control, and the latent probe data.

Schedule (Dreamer's, used by Denoised MDP): prefill ``prefill_steps`` env steps with uniformly random
actions, then repeat: ``updates_per_collect`` gradient steps
(:func:`~platonic_rl.training.updates.update_in_calls`: compiled calls of
:func:`~platonic_rl.training.updates.update_steps`, all in one unless ``updates_per_call`` says otherwise, on a
:class:`~platonic_rl.envs.replay.SequenceSampler` of ``batch_size`` x ``chunk`` sequences) and one exploration
episode (the agent's action + N(0, noise^2), clipped), i.e. 100 updates every 1000 env steps. Env steps are control steps: one episode is 1000 of
them (500 agent steps at action repeat 2). Before the first update, state observations' per-dimension
statistics over the prefill episodes set the agent's normaliser (``normalise_observations``; kept in its
checkpoints). Every ``eval_every`` env steps, ``eval_episodes`` deterministic episodes are evaluated (mean
return, and its spread). The run directory (:class:`~platonic_rl.training.run.RunDirectory`) holds the settings, the
metrics and orbax checkpoints of the agent, the sequence buffer and the loop's counters and key; every
episode resets the env with a seed derived from its index, so a resumed run continues exactly.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.common.settings import budget, fields_on_resume, host_setting
from platonic_rl.agents.contract import check_agent
from platonic_rl.envs.dmc import EPISODE_STEPS, DMCEnv
from platonic_rl.envs.replay import SequenceBuffer, SequenceSampler
from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import RunDirectory, agent_settings
from platonic_rl.training.schedule import EvaluationSchedule, checkpoint_due, episode_seed, eval_seed
from platonic_rl.training.updates import update_in_calls, updates_per_call


@dataclasses.dataclass(frozen=True)
class DMCOnlineConfig:
    task: str = "cheetah-run"          # a DeepMind Control "domain-task"
    variant: str = "noiseless"         # Table D.1's noise variant (envs.dmc.VARIANTS)
    env_steps: int = budget(100_000)   # control steps, the prefill's included
    prefill_steps: int = 5_000         # uniformly random actions first
    updates_per_collect: int = 100     # per episode = per 1000 env steps
    action_repeat: int = 2             # control steps per agent step
    batch_size: int = 50               # sequences per gradient step
    chunk: int = 50                    # agent steps per sequence
    exploration_noise: float = 0.3     # std of the Gaussian noise added to the agent's actions while collecting
    eval_every: int = 10_000           # env steps
    eval_episodes: int = 10            # deterministic episodes per evaluation (mean return; each seeded)
    normalise_observations: bool = True  # state observations standardised with the prefill's statistics
    distractor: str = "twin"           # state variants' distractor source (envs.dmc.DISTRACTORS): "twin" or "signals"
    num_twins: int = 1                 # "twin": copies of the body driven by random actions
    num_distractors: int = 8           # "signals": smooth signals (unused with "twin")
    observation: str = "state"         # or "pixels": 64x64 RGB (stored as uint8)
    video_dir: str | None = None       # pixels: a folder of background videos (default: procedural)
    cheap_visuals: bool = False        # pixels: shadows, reflections and multisampling off
    seed: int = 0                      # the env's, the replay sampler's and the exploration's seed
    checkpoint_every: int = host_setting(5)  # episodes; 0 disables
    resume: bool = host_setting(True)  # continue from run_dir's latest checkpoint (refused if settings differ)
    overwrite: bool = host_setting(False)  # clear run_dir first (a fresh run into a used directory is refused)
    buffer_episodes: int | None = budget(None)  # replay capacity; None: every episode the budget collects (a run
                                                # resumed with a larger env_steps gets its buffer enlarged: the
                                                # saved buffer is resized, keeping every episode, or refused)
    updates_per_call: int | None = host_setting(None)
    """Gradient steps per compiled call (a divisor of updates_per_collect); None: all of an episode's in one call,
    except for a pixel model with XLA's convolutions (``conv_impl="xla"``) on the CPU backend: one per call (XLA:CPU
    runs convolutions inside a loop body several times slower, jax-ml/jax#12868; the default conv_impl has none on
    CPU). The updates and their batches do not depend on the split (the same updates, summed in another order
    within float32 rounding): a run directory resumes, and a benchmark's record matches, whatever it holds."""

    def __post_init__(self):
        for name in ("env_steps", "updates_per_collect", "action_repeat", "batch_size", "chunk", "eval_every",
                     "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"DMCOnlineConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.updates_per_call is not None and (self.updates_per_call < 1
                                                  or self.updates_per_collect % self.updates_per_call):
            raise ValueError(f"DMCOnlineConfig.updates_per_call must be a positive divisor of updates_per_collect="
                             f"{self.updates_per_collect} (or None), got {self.updates_per_call}")
        if self.chunk > self.episode_length + 1:
            raise ValueError(f"DMCOnlineConfig.chunk must be <= {self.episode_length + 1}, got {self.chunk}")

    @property
    def episode_length(self) -> int:
        return EPISODE_STEPS // self.action_repeat

    def unused_fields(self) -> tuple[str, ...]:
        """Fields that change nothing for this run: the distractor source of a noiseless or pixel run (whose
        observation has none), else the other source's count. A run directory resumes whatever they hold."""
        if self.variant == "noiseless" or self.observation == "pixels":
            return ("distractor", "num_twins", "num_distractors")
        return ("num_distractors",) if self.distractor == "twin" else ("num_twins",)

    def make_env(self) -> DMCEnv:
        return DMCEnv(self.task, self.variant, self.seed, self.action_repeat,
                      self.num_distractors if self.distractor == "signals" else None,
                      observation=self.observation, video_dir=self.video_dir, cheap_visuals=self.cheap_visuals,
                      distractor=self.distractor, num_twins=self.num_twins)


def train_chunk(agent, buffer: SequenceBuffer, key, updates: int, batch_size: int, chunk: int, first_step: int = 1,
                per_call: int | None = None):
    """``updates`` gradient steps on sampled sequence chunks, ``per_call`` per compiled call (None: all in one, or
    one per call on CPU if the model has XLA convolutions: :func:`xla_convolutions`,
    :func:`~platonic_rl.training.updates.updates_per_call`); mean metrics. Raises NonFiniteError (naming the
    update, counted from ``first_step``) if anything became NaN or infinite."""
    per_call = updates_per_call(per_call, updates, convolutions=xla_convolutions(agent.config.model))
    return update_in_calls(agent, SequenceSampler(buffer, batch_size, chunk), jax.random.split(key, updates),
                           per_call, first_step)


def xla_convolutions(model) -> bool:
    """Whether a world model (``WorldModelConfig``) runs XLA's convolutions: pixels with the conv pair not computed
    as matmuls (``conv_impl`` "xla", or "auto" off the CPU backend)."""
    return model.pixels and not model.im2col


@jax.jit
def _act(agent, latent, obs, prev_action, key):
    return agent.step(latent, obs, None, prev_action, key)


@jax.jit
def _act_greedy(agent, latent, obs, prev_action):
    return agent.step(latent, obs, None, prev_action)


# The env's ``info`` entries an episode keeps, step by step, for the probes (never shown to the agent).
PROBED_INFO = ("agent_state", "distractor_state", "task_state", "task_reward")


def run_episode(env: DMCEnv, agent=None, key=None, noise: float = 0.0, seed: int | None = None,
                greedy: bool = False) -> dict[str, np.ndarray]:
    """One episode: uniformly random actions without ``agent``. Returns observations [L, D], prev_actions
    [L, A], rewards [L] (L = episode length + 1, zeros at the first step), agent_states, distractor_states,
    task_states, task_rewards [L] (the unperturbed task's reward) and the episode return."""
    obs, info = env.reset(seed=seed)
    action_dim = env.action_space.shape[0]
    # Exploration's own stream: the env seeded with ``seed`` draws its distractors from default_rng(seed).
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    observations, prev_actions, rewards = [obs], [np.zeros(action_dim, np.float32)], [0.0]
    states = {name: [info[name]] for name in PROBED_INFO}
    latent = agent.initial_policy_state(1) if agent is not None else None
    keys = iter(jax.random.split(key, EPISODE_STEPS)) if agent is not None and not greedy else None
    done = False
    while not done:
        if agent is None:
            action = rng.uniform(-1, 1, action_dim).astype(np.float32)
        else:
            o, p = jnp.asarray(observations[-1][None]), jnp.asarray(prev_actions[-1][None])
            action, latent = _act_greedy(agent, latent, o, p) if greedy else _act(agent, latent, o, p, next(keys))
            action = np.asarray(action[0])
            if noise:
                action = np.clip(action + noise * rng.normal(size=action_dim), -1, 1).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        prev_actions.append(action.astype(np.float32))
        rewards.append(reward)
        for name in PROBED_INFO:
            states[name].append(info[name])
        done = terminated or truncated
    return dict(observations=np.stack(observations), prev_actions=np.stack(prev_actions),
                rewards=np.asarray(rewards, np.float32), **{f"{name}s": np.stack(v) for name, v in states.items()},
                episode_return=float(np.sum(rewards)))


SATURATION_MARGIN = 0.05
"""An action component within this of the action bounds (+-1) counts as saturated (:func:`saturated_fraction`)."""


def saturated_fraction(actions, margin: float = SATURATION_MARGIN) -> float:
    """The fraction of the components of ``actions`` (in [-1, 1]) within ``margin`` of +-1: ``margin`` for uniformly
    random actions, 1 for a bang-bang policy (e.g. an arm spun at full torque)."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"saturated_fraction: margin must be in [0, 1) (a distance from +-1), got {margin}")
    actions = np.asarray(actions)
    if actions.size == 0:
        raise ValueError("saturated_fraction: actions is empty")
    return float(np.mean(np.abs(actions) >= 1.0 - margin))


def evaluation_summaries(env: DMCEnv, agent, seeds) -> list[dict[str, float]]:
    """Deterministic episodes of ``agent`` on ``env`` (``act`` without a key: tanh of the actor's pre-tanh mean, from
    the posterior mean; None: :func:`run_episode`'s uniformly random actions), one per env seed in ``seeds``: each
    one's ``episode_return`` and ``saturated_actions`` (:func:`saturated_fraction` of the actions it took)."""
    summaries = []
    for seed in seeds:  # one episode at a time: a pixel episode's frames are dropped once summarised
        episode = run_episode(env, agent, seed=int(seed), greedy=True)
        summaries.append(dict(episode_return=episode["episode_return"],
                              saturated_actions=saturated_fraction(episode["prev_actions"][1:])))
    return summaries


def evaluate(env: DMCEnv, agent, seeds) -> list[float]:
    """The returns of :func:`evaluation_summaries`' episodes."""
    return [summary["episode_return"] for summary in evaluation_summaries(env, agent, seeds)]


def run_directory_options(agent, config: DMCOnlineConfig) -> dict:
    """The :meth:`RunDirectory.open` keywords of a run of ``agent`` under ``config``. A run saved there resumes if
    only the fields declared ``budget`` or ``host_setting`` (the budget, the replay capacity, how the host drives the
    run: :func:`~platonic_rl.common.settings.fields_on_resume`) or fields unused by this run
    (:meth:`DMCOnlineConfig.unused_fields`) differ; other differences are refused."""
    # The loop's config itself (not a dict of it), so that fields added later with their old behaviour as the
    # default match runs saved before them.
    return dict(settings=dict(**agent_settings(agent), loop=config), resume=config.resume, overwrite=config.overwrite,
                step_key="env_steps",
                resumable=tuple(f"loop.{k}" for k in fields_on_resume(config) + config.unused_fields()))


def open_run_directory(run_dir: str | Path, agent, config: DMCOnlineConfig) -> RunDirectory:
    """``run_dir`` opened for ``agent`` trained under ``config`` (:func:`run_directory_options`)."""
    return RunDirectory.open(run_dir, **run_directory_options(agent, config))


def train_dmc_online(agent, config: DMCOnlineConfig, run_dir: str | Path | None = None, desc: str = "dmc"):
    """Algorithm 1 with ``agent`` (a :class:`~platonic_rl.agents.denoised_mdp.DenoisedMDPAgent`). Returns ``(agent,
    history)``; ``history`` rows: env_steps, episode, train_return, mean update metrics, eval_return."""
    check_agent(agent)
    env = config.make_env()
    capacity = config.buffer_episodes or math.ceil(config.env_steps / EPISODE_STEPS) + 1
    buffer = SequenceBuffer.create(capacity, config.episode_length + 1, env.observation_space.shape,
                                   env.action_space.shape[0], dtype=env.observation_space.dtype)
    state = dict(agent=agent, buffer=buffer, key=jax.random.PRNGKey(config.seed), env_steps=jnp.int32(0),
                 episode=jnp.int32(0))
    with LoopRun.start(state, budget=config.env_steps, run_dir=run_dir, resize_buffer=True, desc=desc,
                       position=lambda s: int(s["env_steps"]), **run_directory_options(agent, config)) as loop:
        state, bar = loop.state, loop.bar

        def store(episode):
            state["buffer"] = state["buffer"].add(jnp.asarray(episode["observations"]),
                                                  jnp.asarray(episode["prev_actions"]), jnp.asarray(episode["rewards"]))
            state["env_steps"] = state["env_steps"] + EPISODE_STEPS
            state["episode"] = state["episode"] + 1
            bar.update(EPISODE_STEPS)

        evaluations = EvaluationSchedule(config.eval_every, int(state["env_steps"]))
        while int(state["env_steps"]) < config.env_steps:
            index = int(state["episode"])
            seed = episode_seed(config.seed, index)
            row = {}
            if int(state["env_steps"]) < config.prefill_steps:
                episode = run_episode(env, seed=seed)
            else:
                key, train_key, act_key = jax.random.split(state["key"], 3)
                first = (index - math.ceil(config.prefill_steps / EPISODE_STEPS)) * config.updates_per_collect + 1
                if first == 1 and config.normalise_observations and len(env.observation_space.shape) == 1:
                    stored = state["buffer"].observations[:int(state["buffer"].size)]  # the prefill episodes
                    state["agent"] = state["agent"].with_observation_statistics(stored)
                state["agent"], metrics = train_chunk(state["agent"], state["buffer"], train_key,
                                                      config.updates_per_collect, config.batch_size, config.chunk, first,
                                                      config.updates_per_call)
                state["key"] = key
                row.update({k: float(v) for k, v in metrics.items()})
                episode = run_episode(env, state["agent"], act_key, config.exploration_noise, seed=seed)
            store(episode)
            row = {"env_steps": int(state["env_steps"]), "episode": index + 1, "train_return": episode["episode_return"],
                   **row}
            if evaluations.due(int(state["env_steps"]), final=int(state["env_steps"]) >= config.env_steps):
                returns = evaluate(env, state["agent"], [eval_seed(index) + 1_000_000 * i
                                                         for i in range(config.eval_episodes)])
                row["eval_return"] = float(np.mean(returns))
                row["eval_return_std"] = float(np.std(returns))
                bar.set_postfix(eval_return=f"{row['eval_return']:.0f}")
            final = int(state["env_steps"]) >= config.env_steps
            loop.finish_row(row, int(state["env_steps"]), state,
                            due=checkpoint_due(index + 1, config.checkpoint_every, final))
    return state["agent"], loop.history
