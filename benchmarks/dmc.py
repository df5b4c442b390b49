"""Denoised MDP vs Dreamer on DeepMind Control with noise distractors (state observations, or 64x64 pixels with
``--observation pixels``; Table 5.1).

    python -m platonic_rl.benchmarks.dmc                                   # 3 tasks x 4 variants, CPU preset, 1 seed
    python -m platonic_rl.benchmarks.dmc --tasks cheetah-run --variants noisy_sensor --seeds 0 1 2 --env-steps 50000

Each (task, variant, method, seed) runs Algorithm 1 (:mod:`platonic_rl.training.world_model`), then a **denoising
probe**: episodes of the trained agent are filtered with the posterior, and ridge regressions from the x
features and from the y features ([belief, state] of each factor; Dreamer has only x) to the true agent
state (MuJoCo qpos, qvel) and to the distractor state are fitted on ``probe_train`` episodes (the ridge
strength chosen by leave-one-episode-out cross-validation) and scored (R^2 pooled over standardised
target dimensions) on ``probe_test`` held-out episodes. A model that denoises keeps the agent state in x and the
distractors out of it. A finished run asked for with other probe settings is probed again from its final checkpoint
(where that is on the machine), without training; so is one asked for with a final evaluation of another size
(``--final-eval-episodes``: many deterministic episodes at the budget, for tasks whose returns vary a lot from
episode to episode, such as reacher's). Denoised MDP uses Table D.5's beta for backprop-via-dynamics per
task and variant, and the thesis' alpha for the observation's size (``presets.observation_alpha``). State variants draw
their distractors from ``--distractor`` (default ``twin``: a copy of the body driven by random actions;
``envs/dmc.py``).

Saves ``results.json`` (command, configs, curves, probe scores), ``returns.png`` (episode return vs env
steps per task and variant) and ``probe.png`` (R^2 bars), and prints a table with Table 5.1's pixel-based
1M-step averages beside ours for orientation only: those are from 64x64 images with video backgrounds at
50-100x our budget, ours are state observations with the analogous distractors (``envs/dmc.py``).
"""
from __future__ import annotations

import dataclasses
import json
import textwrap
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import tyro

from platonic_rl.common.settings import HOST, fields_on_resume, recorded_fields
from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import DMC_BETAS as BETAS  # noqa: F401 -- Table D.5, read as dmc.BETAS
from platonic_rl.benchmarks.presets import DMC_PRESETS, DMCMethodSettings, make_config
from platonic_rl.common.records import as_json, describe_differences, read_json, settings_differences, write_json
from platonic_rl.training.run import RUN_FORMAT, RunDirectory
from platonic_rl.benchmarks.dmc_probe import latent_probe_data
from platonic_rl.training.world_model import (SATURATION_MARGIN, DMCOnlineConfig, evaluation_summaries, run_episode,
                                               train_dmc_online)
from platonic_rl.denoised.model import all_features
from platonic_rl.envs.dmc import TASKS, VARIANTS
from platonic_rl.replearn.probes import affine_explained, explained, ridge_probe_r2

# Table 5.1, backprop via dynamics, mean over the three tasks, 64x64 pixels, 1M env steps (for orientation).
TABLE_5_1 = {"noiseless": (801.4, 848.6), "distractors": (597.7, 227.8), "noisy_sensor": (563.1, 212.4),
             "jitter": (254.1, 98.6)}  # (Denoised MDP, Dreamer); the pixel variants are video background (+ ...)
# Published pixel Dreamer at 100k env steps (CURL's table): what Dreamer from states should at least reach there.
ANCHORS_100K = {"cheetah-run": 235.0, "walker-walk": 277.0, "reacher-easy": 314.0}
Method = Literal["denoised", "dreamer"]


@dataclasses.dataclass(frozen=True)
class Args:
    tasks: tuple[str, ...] = tuple(TASKS)
    variants: tuple[str, ...] = VARIANTS
    methods: tuple[Method, ...] = ("denoised", "dreamer")
    seeds: tuple[int, ...] = (0,)
    env_steps: int = 15_000
    """Env (control) steps per run, 5000 of them random prefill; 100 updates per 1000 after that."""
    preset: Literal["cpu", "paper"] = "cpu"
    overwrite: bool = False
    """Clear each run directory first (rerunning otherwise resumes, or refuses other settings)."""
    eval_episodes: int = 10
    """Deterministic episodes per evaluation (every 10k env steps and at the budget)."""
    final_eval_episodes: int = 0
    """Deterministic episodes of a final evaluation of the trained agent, on env seeds shared by every run
    (``FINAL_EVAL_SEED`` on); the tables then report its mean instead of the last periodic evaluation's, and the
    share of saturated actions (``training.world_model.saturated_fraction``). 0: none. A finished run without one of
    this size is evaluated from its final checkpoint, training nothing (refused where that checkpoint is not on this
    machine)."""
    evaluate_again: bool = False
    """With ``final_eval_episodes``: evaluate every finished run again from its final checkpoint (e.g. after the
    evaluation's code changed), training nothing; refused for a run whose final checkpoint is not on this machine."""
    distractor: Literal["twin", "signals"] = "twin"
    """State variants: the uncontrollable, reward-irrelevant source (``envs.dmc``): ``twin`` copies of the body driven
    by random actions, or the smooth ``signals`` that results recorded before 2026-11-26 used."""
    num_twins: int = 1
    """``twin``: copies of the body appended to the observation."""
    normalise_observations: bool = True
    """Standardise state observations with the prefill's per-dimension statistics (off: raw vectors)."""
    observation: Literal["state", "pixels"] = "state"
    """``pixels``: 64x64 RGB images with the pixel variants (video background, noisy sensor, camera jitter)."""
    video_dir: str | None = None
    """Pixels: a folder of background videos (default: the procedural moving texture)."""
    cheap_visuals: bool = False
    """Pixels: render without shadows, reflections and multisampling (faster)."""
    reconstructions: int = 4
    """Pixels: frames of an evaluation episode shown in reconstructions.png (observation, decoded from x alone,
    from y alone)."""
    probe_train: int = 4
    """Episodes the probe's ridge regressions are fitted on (a finished run whose final checkpoint is here is probed
    again, without training, when this or ``probe_test`` changes)."""
    probe_test: int = 2
    """Held-out episodes the probe is scored on."""
    probe_again: bool = False
    """Probe every finished run again from its final checkpoint (e.g. after the probe's code changed), training
    nothing; refused for a run whose final checkpoint is not on this machine."""
    batch_size: int | None = None
    """Sequences per world-model batch (default: the preset's; cpu 16, paper 50)."""
    chunk: int | None = None
    """Steps per sequence (default: the preset's; cpu 32, paper 50)."""
    updates_per_call: int | None = None
    """Gradient steps per compiled call (a divisor of 100; default: all 100 in one call; one per call on CPU for a
    pixel model with XLA convolutions, which the default conv_impl does not have there).
    Changes the speed only, not the updates."""
    agent: tyro.conf.OmitArgPrefixes[DMCMethodSettings] = DMCMethodSettings()
    """The methods' settings (:class:`~platonic_rl.benchmarks.presets.DMCMethodSettings`), flags without a prefix
    (``--free-nats``, ``--beta``, ...)."""
    out_dir: str = "results/dmc"

    def __post_init__(self):
        for name, known in (("tasks", sorted(TASKS)), ("variants", list(VARIANTS)),
                            ("methods", list(Method.__args__)), ("seeds", None)):
            if not getattr(self, name):
                raise ValueError(f"--{name} must list at least one value" + (f" of {known}" if known else "")
                                 + ", got none")
        if self.distractor == "signals" and self.num_twins != 1:
            raise ValueError(f"--num-twins is for --distractor twin, got {self.num_twins} with 'signals'")
        if self.final_eval_episodes < 0:
            raise ValueError("--final-eval-episodes must be >= 0 (0: no final evaluation), "
                             f"got {self.final_eval_episodes}")
        if self.evaluate_again and not self.final_eval_episodes:
            raise ValueError("--evaluate-again re-makes the final evaluation: it needs --final-eval-episodes >= 1")
        for name in ("env_steps", "probe_train", "probe_test", "num_twins"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        longest = DMCOnlineConfig().episode_length + 1  # observations per stored episode
        if self.chunk is not None and self.chunk > longest:
            raise ValueError(f"--chunk must be <= {longest} (the steps of a stored episode), got {self.chunk}")
        for name in ("batch_size", "chunk"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")


def loop_config(args: Args, task: str, variant: str, seed: int) -> DMCOnlineConfig:
    """The training loop of one (task, variant, seed) run under ``args``: every flag named as a field of
    :class:`~platonic_rl.training.world_model.DMCOnlineConfig` sets that field (a new loop setting is its field and its
    flag), the preset fills the sizes left unset, and evaluations come every 10k env steps (or at the budget)."""
    p = DMC_PRESETS[args.preset]
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(DMCOnlineConfig) if hasattr(args, f.name)}
    return DMCOnlineConfig(**{**flags, "task": task, "variant": variant, "seed": seed,
                              "batch_size": args.batch_size or p["batch_size"], "chunk": args.chunk or p["chunk"],
                              "eval_every": min(10_000, args.env_steps)})


OPEN_LOOP_READOUTS = (1, 5, 15)  # steps of the x prior after the posterior (15: the imagination horizon)


def probe(agent, loop: DMCOnlineConfig, args: Args, seed: int) -> dict:
    """The denoising probe's held-out R^2 of each ridge read-out (``x->agent_state``, ...; ``x->task_state`` and
    ``y->task_state`` where the task has uncontrolled reward variables: reacher's target), and how much of the
    received reward each reward head predicts on all the probe's episodes (no fitting: R^2 of the head's own output):
    ``r_x->reward`` (the head the policy learns from in imagination) and, with y, ``r_x+r_y->reward`` (the model's
    reward). A gap between the two is reward the model explains with y, out of the policy's reach. Only the heads'
    sum is fitted, so a constant can sit in either head: ``r_x->reward (affine)`` (:func:`affine_explained`) is
    blind to it and to r_x's scale, neither of which changes the actions imagination favours. Where the received
    reward is not the task's own (the noisy sensor: part of it is the noise, which r_y should take),
    ``r_x->task_reward (affine)`` scores r_x against the unperturbed task's reward, the part the policy can earn.
    ``r_x->task_reward (affine), k steps open loop`` (k in :data:`OPEN_LOOP_READOUTS`) scores the same head on the
    state the x prior reaches k steps after the posterior with the actions taken
    (:func:`~platonic_rl.training.world_model.open_loop_reward_x`): what imagination's rollouts keep of the reward
    (with the noisy sensor also ``r_x->reward (affine), k steps open loop``, against the reward received)."""
    data = latent_probe_data(agent, loop, args.probe_train + args.probe_test, seed=20_000_000 + seed)
    train = data["episode"] < args.probe_train
    scores = {}
    for factor in ("x", "y"):
        if factor not in data:
            continue
        for target in ("agent_state", "distractor_state", "task_state"):
            if target == "task_state" and data[target].shape[1] == 0:
                continue  # the task has none (cheetah, walker)
            scores[f"{factor}->{target}"] = ridge_probe_r2(data[factor][train], data[target][train],
                                                           data[factor][~train], data[target][~train], alpha=None,
                                                           groups=data["episode"][train])
    scores["r_x->reward"] = explained(data["reward"], data["reward_x"])
    scores["r_x->reward (affine)"] = affine_explained(data["reward"], data["reward_x"])
    noisy_reward = not np.allclose(data["task_reward"], data["reward"])  # the noisy sensor: the reward holds noise too
    if noisy_reward:
        scores["r_x->task_reward (affine)"] = affine_explained(data["task_reward"], data["reward_x"])
    for k in OPEN_LOOP_READOUTS:
        if "reward_x_open_loop" in data and k <= data["reward_x_open_loop"].shape[1]:
            ahead = data["reward_x_open_loop"][:, k - 1]
            known = np.isfinite(ahead)  # steps at least k after their episode's first
            scores[f"r_x->task_reward (affine), {k} steps open loop"] = affine_explained(data["task_reward"][known],
                                                                                         ahead[known])
            if noisy_reward:  # also against the reward received
                scores[f"r_x->reward (affine), {k} steps open loop"] = affine_explained(data["reward"][known],
                                                                                    ahead[known])
    if "reward_y" in data:
        scores["r_x+r_y->reward"] = explained(data["reward"], data["reward_x"] + data["reward_y"])
    return scores


def run(args: Args) -> dict:
    for task in args.tasks:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASKS)}")
    for variant in args.variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    runs, pictures = [], {}
    for task in args.tasks:
        for variant in args.variants:
            env = loop_config(args, task, variant, 0).make_env()
            obs_shape, action_dim = env.observation_space.shape, env.action_space.shape[0]
            for method in args.methods:
                for seed in args.seeds:
                    loop = loop_config(args, task, variant, seed)
                    config = make_config(method, task, variant, obs_shape, action_dim, args.preset, args.agent)
                    run_dir = out / f"{task}_{variant}_{method}_seed{seed}"
                    saved = None if args.overwrite else finished_record(run_dir, config, loop, args)
                    if saved is not None:
                        again = dict(redo_probe=args.probe_again or saved.get("probe_settings") != probe_settings(args),
                                     final=args.final_eval_episodes > 0
                                     and (args.evaluate_again or final_episodes(saved) != args.final_eval_episodes))
                        if any(again.values()):
                            saved = measure_again(saved, run_dir, config, loop, args, seed, **again)
                        else:
                            print(f"{task} {variant} {method} seed {seed}: finished in {run_dir}, its record reused",
                                  flush=True)
                    if saved is not None:  # finished earlier (perhaps on another machine): nothing to train
                        runs.append(saved)
                        continue
                    start = time.time()
                    agent = DenoisedMDPAgent.create(config, seed)  # made only to train: a reused record needs none
                    agent, history = train_dmc_online(agent, loop, run_dir, desc=f"{task} {variant} {method} s{seed}")
                    runs.append(dict(run_record(task, variant, method, seed, config, loop, history,
                                                probe(agent, loop, args, seed), time.time() - start),
                                     probe_settings=probe_settings(args)))
                    if args.final_eval_episodes:
                        runs[-1]["final_evaluation"] = final_evaluation(agent, loop, args.final_eval_episodes)
                    write_json(run_dir / RECORD, runs[-1])
                    if args.observation == "pixels" and args.reconstructions and method == "denoised":
                        pictures[f"reconstructions_{task}_{variant}_seed{seed}.png"] = (
                            lambda path, a=agent, lp=loop, t=f"{task} / {variant}, seed {seed}":
                            plot_reconstructions(path, a, lp, args.reconstructions, t, _budget(args)))
                    scores = {k: round(v, 3) for k, v in runs[-1]["probe"].items()}
                    print(f"{task} {variant} {method} seed {seed}: return at the budget "
                          f"{final_return(runs[-1], bool(args.final_eval_episodes)):.1f}, probe {json.dumps(scores)}",
                          flush=True)
    summary = summarise(runs, final=bool(args.final_eval_episodes))
    # What no learning scores on the final evaluation's episodes: uniformly random actions, per task and variant.
    random_returns = {f"{task} {variant}": random_actions(loop_config(args, task, variant, 0),
                                                          args.final_eval_episodes)
                      for task in args.tasks for variant in args.variants} if args.final_eval_episodes else {}
    plots = {"returns.png": lambda path: plot_returns(path, args, runs, random_returns),
             "probe.png": lambda path: plot_probe(path, args, summary), **pictures}
    return report.save_run(out, "platonic_rl.benchmarks.dmc", args,
                           dict(runs=runs, summary=summary,
                                **(dict(random_actions=random_returns) if random_returns else {})),
                           table=format_table(args, summary, runs, random_returns), plots=plots,
                           total_seconds=time.time() - t0)


RECORD = "record.json"  # a finished run's curves, probe and configs, beside its metrics


def run_record(task: str, variant: str, method: str, seed: int, config: DenoisedMDPConfig, loop: DMCOnlineConfig,
               history: list[dict], probe_scores: dict, seconds: float) -> dict:
    """What the benchmark keeps of one finished run (JSON-able), of the agent made with ``config``. ``seconds``:
    this call's training and probe; ``loop_seconds``: the training loop's wall-clock summed over its rows (env
    steps, updates and evaluations; resumed runs included, compilation in the first rows); ``seconds_per_10k``:
    :func:`seconds_per_10k`."""
    evals = [r for r in history if "eval_return" in r]
    return dict(task=task, variant=variant, method=method, seed=seed, beta=config.beta,
                alpha=config.alpha,
                env_steps=[r["env_steps"] for r in history], train_return=[r["train_return"] for r in history],
                eval_steps=[r["env_steps"] for r in evals], eval_return=[r["eval_return"] for r in evals],
                eval_return_std=[r.get("eval_return_std", 0.0) for r in evals], probe=probe_scores, seconds=seconds,
                loop_seconds=float(sum(r.get("row_seconds", 0.0) for r in history)),
                seconds_per_10k=seconds_per_10k(history, loop.prefill_steps),
                signals=learning_signals(history, loop.eval_every),
                agent_config=as_json(config), loop=as_json(recorded_fields(loop, HOST)))


NOT_SIGNALS = ("env_steps", "episode", "train_return", "eval_return", "eval_return_std", "row_seconds")


def learning_signals(history: list[dict], every: int = 10_000) -> dict[str, list]:
    """The update metrics of ``history`` (KL_x, KL_y, reward and reconstruction NLLs, imagined reward, ...) as means
    over consecutive windows of ``every`` env steps: ``{"env_steps": [window ends], metric: [means]}``. A row counts
    in the window that holds its ``env_steps`` (a row at 10k ends the first window of 10k); windows without updates
    (the random prefill) are left out, and a metric absent from a window's rows is None there."""
    if every < 1:
        raise ValueError(f"every must be >= 1 env step, got {every}")
    windows: dict[int, list[dict]] = {}
    for row in history:
        metrics = {k: v for k, v in row.items() if k not in NOT_SIGNALS}
        if metrics:
            windows.setdefault(-(-int(row["env_steps"]) // every) * every, []).append(metrics)
    names = sorted({k for rows in windows.values() for row in rows for k in row})
    ends = sorted(windows)
    signals = {"env_steps": ends}
    for name in names:
        signals[name] = []
        for end in ends:
            values = [row[name] for row in windows[end] if name in row]
            signals[name].append(float(np.mean(values)) if values else None)
    return signals


def seconds_per_10k(history: list[dict], prefill_steps: int) -> float | None:
    """Wall-clock per 10k env steps of training (collecting an episode and its updates): the mean over the rows
    after the random prefill that hold no evaluation, the first of them left out (it compiles the update), scaled
    to 10k env steps; None if there are none. A wall-clock: it holds only for a machine that ran nothing else."""
    pairs = [(before, row) for before, row in zip(history, history[1:])
             if before["env_steps"] > prefill_steps and "row_seconds" in row and "eval_return" not in row]
    if not pairs:
        return None
    steps = sum(row["env_steps"] - before["env_steps"] for before, row in pairs)
    return 1e4 * sum(row["row_seconds"] for _, row in pairs) / steps


def finished_record(run_dir: Path, config: DenoisedMDPConfig, loop: DMCOnlineConfig, args: Args) -> dict | None:
    """The saved record of a run in ``run_dir`` that finished with these settings (the agent's ``config``, the
    loop's and the probe's), else None (nothing saved, or a run whose budget ``loop.env_steps`` grows: it trains on
    from its checkpoint, whatever the probe's settings). Checkpoints stay on the machine that made them; a record
    lets a fresh clone rebuild the tables and plots without training again, and without making (compiling) an agent.
    A record that differs only in the probe's settings is returned where the run's final checkpoint is in
    ``run_dir`` (to be probed again), and refused where it is not."""
    path = Path(run_dir) / RECORD
    if not path.exists():
        return None
    saved_format = RunDirectory.saved_format(run_dir)
    if saved_format not in (None, RUN_FORMAT):
        raise ValueError(f"{path} was recorded by an earlier version of platonic-rl (run format {saved_format}; "
                         "CHANGELOG.md): its settings do not compare with today's. Pass --overwrite to train it "
                         "again, or choose another --out-dir")
    record = read_json(path, "a finished run's record")
    keys = ("agent_config", "loop", "probe_settings")
    differ = settings_differences({k: record[k] for k in keys if k in record},
                                  dict(agent_config=config, loop=loop, probe_settings=probe_settings(args)),
                                  ignore=tuple(f"loop.{k}" for k in fields_on_resume(loop, HOST) + loop.unused_fields()))
    probe_only = bool(differ) and all(name.startswith("probe_settings.") for name in differ)
    grows = "loop.env_steps" in differ and differ["loop.env_steps"][1] > differ["loop.env_steps"][0]
    if grows and all(name == "loop.env_steps" or name.startswith("probe_settings.") for name in differ):
        return None  # trains on from its checkpoint, then is probed with this call's settings
    if probe_only and RunDirectory.saved_step(run_dir) == loop.env_steps:
        return record  # the caller probes it again from its final checkpoint (measure_again)
    if differ:
        absent = (f"\nits final checkpoint (env steps {loop.env_steps}) is not in {Path(run_dir) / 'checkpoints'}, "
                  "so it cannot be probed again without training" if probe_only else "")
        raise ValueError(f"{path} holds a finished run with other settings than this call's:\n"
                         f"{describe_differences(differ)}{absent}\npass --overwrite to train it again, or choose "
                         "another --out-dir")
    return record


def measure_again(record: dict, run_dir: Path, config: DenoisedMDPConfig, loop: DMCOnlineConfig, args: Args,
                  seed: int, redo_probe: bool, final: bool) -> dict:
    """``record`` (a finished run's) with its probe redone (``redo_probe``) and/or its ``final`` evaluation made under
    ``args``' settings from the run's final checkpoint in ``run_dir``, which trains nothing; the curves are kept.
    Saved over the old record."""
    what = " and ".join(name for name, due in (("probe", redo_probe), ("evaluate", final)) if due)
    if RunDirectory.saved_step(run_dir) != loop.env_steps:
        raise ValueError(f"cannot {what} {run_dir} without training: its final checkpoint (env steps "
                         f"{loop.env_steps}) is not in {Path(run_dir) / 'checkpoints'} (checkpoints stay on the "
                         "machine that trained the run)")
    start = time.time()
    agent, history = train_dmc_online(DenoisedMDPAgent.create(config, seed), loop, run_dir,  # restores, trains nothing
                                      desc=f"{run_dir.name} (restored)")
    if not history or history[-1]["env_steps"] != loop.env_steps:
        raise RuntimeError(f"{run_dir}'s checkpoint did not restore the finished run at {loop.env_steps} env steps")
    if redo_probe:
        print(f"{run_dir.name}: probed again ({record.get('probe_settings')} -> {probe_settings(args)}, from the "
              f"checkpoint at {loop.env_steps} env steps)", flush=True)
        record = dict(record, probe=probe(agent, loop, args, seed), probe_settings=probe_settings(args),
                      probe_seconds=time.time() - start)
    if final:
        record = dict(record, final_evaluation=final_evaluation(agent, loop, args.final_eval_episodes))
        print(f"{run_dir.name}: evaluated at the budget over {args.final_eval_episodes} episodes: "
              f"{record['final_evaluation']['mean']:.1f}", flush=True)
    write_json(run_dir / RECORD, record)
    return record


def probe_settings(args: Args) -> dict:
    return dict(train_episodes=args.probe_train, test_episodes=args.probe_test)


FINAL_EVAL_SEED = 30_000_000
"""The env seed of a final evaluation's first episode (the i-th: this + i): the same episodes for every run, so
that methods and seeds are compared on the same targets and starts."""


def final_evaluation(agent, loop: DMCOnlineConfig, episodes: int) -> dict:
    """The trained ``agent``'s returns on ``episodes`` deterministic episodes of ``loop``'s env (seeded from
    ``FINAL_EVAL_SEED``; None: uniformly random actions), their mean and standard deviation, and the share of
    saturated action components over all the episodes (each is as long as the others)."""
    summaries = evaluation_summaries(loop.make_env(), agent, range(FINAL_EVAL_SEED, FINAL_EVAL_SEED + episodes))
    returns = [s["episode_return"] for s in summaries]
    return dict(episodes=episodes, first_seed=FINAL_EVAL_SEED, returns=returns, mean=float(np.mean(returns)),
                std=float(np.std(returns)),
                saturated_actions=float(np.mean([s["saturated_actions"] for s in summaries])))


def random_actions(loop: DMCOnlineConfig, episodes: int) -> dict:
    """Uniformly random actions on the final evaluation's ``episodes`` (the same env seeds): the return that no
    learning gets, their mean and standard deviation (:func:`final_evaluation` without an agent, its returns left
    out)."""
    return {k: v for k, v in final_evaluation(None, loop, episodes).items() if k != "returns"}


def final_episodes(record: dict) -> int:
    """Episodes of the record's final evaluation (0: none)."""
    return int(record.get("final_evaluation", {}).get("episodes", 0))


def final_return(run: dict, final: bool = False) -> float:
    """The return at the budget: the final evaluation's mean (``final``), else the last periodic evaluation's (the
    mean return of ``eval_episodes`` deterministic episodes)."""
    if final:
        if not final_episodes(run):
            raise ValueError(f"{run['task']} {run['variant']} {run['method']} seed {run['seed']}: the record has no "
                             "final evaluation (run with --final-eval-episodes to make one)")
        return float(run["final_evaluation"]["mean"])
    return float(run["eval_return"][-1])


def summarise(runs: list[dict], final: bool = False) -> dict:
    """Per (variant, method): mean return at the budget over tasks and seeds (:func:`final_return`), and mean probe
    R^2 per read-out (NaN for a read-out some of the runs lack, e.g. the reward heads' of records probed before they
    were measured)."""
    summary = {}
    for run in runs:
        entry = summary.setdefault(run["variant"], {}).setdefault(run["method"], dict(returns=[], probe={}))
        entry["returns"].append(final_return(run, final))
        for k, v in run["probe"].items():
            entry["probe"].setdefault(k, []).append(v)
    for variant in summary.values():
        for entry in variant.values():
            entry["mean_return"] = float(np.mean(entry["returns"]))
            entry["mean_probe"] = {k: float(np.nanmean(v)) if np.isfinite(v).any() and len(v) == len(entry["returns"])
                                   else float("nan") for k, v in entry["probe"].items()}
    return summary


def format_table(args: Args, summary: dict, runs: list[dict] = (), random_returns: dict | None = None) -> str:
    """The printed table: per variant and method the mean return and probe; with ``runs``, each task's return per
    seed; with ``random_returns`` (``"task variant"`` -> :func:`random_actions`), what random actions score on the
    final evaluation's episodes."""
    lines = [f"DMC ({args.observation} observations), {len(args.tasks)} task(s), {len(args.seeds)} seed(s), "
             f"{args.env_steps} env steps, preset {args.preset!r}, policy {args.agent.policy!r}, "
             f"actor {args.agent.actor!r}; returns averaged over tasks",
             "probe: held-out R^2 of ridge read-outs of the agent's and the distractors' state from x and y; "
             "r_x, r_x+r_y: R^2 of the reward heads' own predictions of the received reward; r_x aff: of r_x's "
             "best affine map (blind to a constant moved between the heads)",
             f"{'variant':14s}{'method':10s}{'return':>9s}{'x->agent':>10s}{'x->distr':>10s}{'y->agent':>10s}"
             f"{'y->distr':>10s}{'r_x':>8s}{'r_x aff':>9s}{'r_x+r_y':>9s}   Table 5.1 (pixels, 1M steps)"]
    fmt = lambda v: f"{v:10.3f}" if v is not None and np.isfinite(v) else f"{'-':>10s}"  # noqa: E731
    for variant, methods in summary.items():
        for method, entry in methods.items():
            p = entry["mean_probe"]
            paper = TABLE_5_1[variant][0 if method == "denoised" else 1]
            lines.append(f"{variant:14s}{method:10s}{entry['mean_return']:9.1f}{fmt(p.get('x->agent_state'))}"
                         f"{fmt(p.get('x->distractor_state'))}{fmt(p.get('y->agent_state'))}"
                         f"{fmt(p.get('y->distractor_state'))}{fmt(p.get('r_x->reward'))[2:]}"
                         f"{fmt(p.get('r_x->reward (affine)'))[1:]}{fmt(p.get('r_x+r_y->reward'))[1:]}   {paper:.1f}")
    if runs:
        final = bool(args.final_eval_episodes)
        evaluation = (f"final evaluation, {args.final_eval_episodes} episodes" if final
                      else f"last periodic evaluation, {args.eval_episodes} episodes")
        lines += ["", f"Return at the budget per task (deterministic {evaluation}), each seed, mean +- std over seeds",
                  f"{'task':14s}{'variant':14s}{'method':10s}{'mean':>8s}{'std':>7s}   seeds"]
        # the final evaluations' shares of saturated actions, where every seed's record has one (not those before it)
        saturation = {} if not final else {key: list(shares.values()) for key, shares in per_task(
            runs, lambda run: run.get("final_evaluation", {}).get("saturated_actions")).items()
            if None not in shares.values()}
        for (task, variant, method), finals in per_task_returns(runs, final).items():
            values = np.array(list(finals.values()))
            shares = saturation.get((task, variant, method))
            lines.append(f"{task:14s}{variant:14s}{method:10s}{values.mean():8.1f}{values.std():7.1f}   "
                         + ", ".join(f"{seed}: {v:.1f}" for seed, v in finals.items())
                         + (f"; saturated actions {' / '.join(f'{v:.2f}' for v in shares)}" if shares else ""))
        for name, reference in (random_returns or {}).items():
            task, variant = name.split()
            lines.append(f"{task:14s}{variant:14s}{'random':10s}{reference['mean']:8.1f}{reference['std']:7.1f}   "
                         f"uniformly random actions, the same {reference['episodes']} episodes (std over episodes)"
                         + (f"; saturated actions {reference['saturated_actions']:.2f}"
                            if "saturated_actions" in reference else ""))
        if saturation:
            lines.append(f"saturated actions: the share of action components within {SATURATION_MARGIN} of +-1 in the "
                         "final evaluation, per seed (uniformly random actions: about that margin; a bang-bang "
                         "policy: 1)")
        timed = [r for r in runs if r.get("seconds_per_10k")]
        if timed:
            lines += ["", "Wall-clock per 10k env steps of training after the prefill, evaluations excluded (s; only "
                      "meaningful where nothing else ran)"]
            lines += [f"  {r['task']} {r['variant']} {r['method']} seed {r['seed']}: {r['seconds_per_10k']:.0f}"
                      for r in timed]
    return "\n".join(lines)


def per_task(runs: list[dict], value) -> dict[tuple[str, str, str], dict[int, object]]:
    """(task, variant, method) -> {seed: ``value(run)``}, in the order the runs came."""
    out = {}
    for run in runs:
        out.setdefault((run["task"], run["variant"], run["method"]), {})[run["seed"]] = value(run)
    return out


def per_task_returns(runs: list[dict], final: bool = False) -> dict[tuple[str, str, str], dict[int, float]]:
    """(task, variant, method) -> {seed: the return at the budget (:func:`final_return`)}, in the order the runs
    came."""
    return per_task(runs, lambda run: final_return(run, final))


def _budget(args: Args) -> str:
    p = DMC_PRESETS[args.preset]
    starts = args.agent.imagine_starts or p["agent"].get("imagine_starts") or "all"
    return (f"{len(args.tasks)} task(s) x {len(args.variants)} variant(s), {len(args.seeds)} seed(s), "
            f"{args.env_steps:,} env steps per run, {args.observation}, preset {args.preset!r} (batch "
            f"{args.batch_size or p['batch_size']} x {args.chunk or p['chunk']}, imagining from {starts}), "
            f"policy {args.agent.policy!r}, actor {args.agent.actor!r}"
            + "".join(f", {setting}" for setting in args.agent.changed())
            + ("" if args.observation == "pixels" else f", distractors {args.distractor}"
               + (f" x{args.num_twins}" if args.distractor == "twin" else "")))


def plot(out: Path, args: Args, runs: list[dict], summary: dict) -> dict:
    """``returns.png`` and ``probe.png`` in ``out``; returns the (closed) Figures by name."""
    return {"returns": plot_returns(Path(out) / "returns.png", args, runs),
            "probe": plot_probe(Path(out) / "probe.png", args, summary)}


def plot_returns(path: Path, args: Args, runs: list[dict], random_returns: dict | None = None):
    """Episode return vs env steps, one panel per (task, variant), with each run's final evaluation (mean +- its
    standard error) at the budget where ``args`` asks for one, and random actions' mean return on its episodes
    (``random_returns``: :func:`random_actions`) dotted; returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from platonic_rl.envs.dmc import EPISODE_STEPS

    fig, axes = plt.subplots(len(args.tasks), len(args.variants), squeeze=False,
                             figsize=(max(3.4 * len(args.variants), 6.0), 2.6 * len(args.tasks) + 0.8))
    for i, task in enumerate(args.tasks):
        for j, variant in enumerate(args.variants):
            ax = axes[i, j]
            for method, color in (("denoised", "C0"), ("dreamer", "C1")):
                chosen = [r for r in runs if (r["task"], r["variant"], r["method"]) == (task, variant, method)]
                for k, r in enumerate(chosen):
                    sparse = len(r["env_steps"]) <= 20  # few exploration episodes: mark each one
                    ax.plot(r["env_steps"], r["train_return"], color=color, alpha=0.35, lw=1,
                            marker="." if sparse else None, ms=4)
                    ax.plot(r["eval_steps"], r["eval_return"], "o-", color=color, ms=3,
                            label=method if k == 0 else None)
                    if args.final_eval_episodes:
                        e = r["final_evaluation"]
                        ax.errorbar(r["eval_steps"][-1] * 1.03, e["mean"], e["std"] / np.sqrt(e["episodes"]),
                                    color=color, marker="D", ms=4, capsize=2, lw=1,
                                    label=f"{method}: final, {e['episodes']} episodes (+- s.e.)" if k == 0 else None)
            if variant == "noiseless" and task in ANCHORS_100K:
                ax.axhline(ANCHORS_100K[task], color="0.4", ls="--", lw=1, label="pixel Dreamer at 100k (CURL)")
            if random_returns and f"{task} {variant}" in random_returns:
                ax.axhline(random_returns[f"{task} {variant}"]["mean"], color="0.4", ls=":", lw=1.2,
                           label="uniformly random actions")
            ax.set_title(f"{task} / {variant}", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == len(args.tasks) - 1:
                ax.set_xlabel("env steps (control steps)", fontsize=8)
            if j == 0:
                ax.set_ylabel(f"episode return\n(sum of rewards, {EPISODE_STEPS} steps)", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    legend = ("Episode return (faint lines: exploration episodes; dots: deterministic evaluation"
              + ("; diamonds: final evaluation" if args.final_eval_episodes else "") + ")")
    fig.suptitle(textwrap.fill(legend, 90) + "\n" + textwrap.fill(_budget(args), 90), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def plot_probe(path: Path, args: Args, summary: dict):
    """Held-out R^2 of each probe read-out per noise variant (mean over tasks and seeds); returns the (closed)
    Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    readouts = [("denoised", "x->agent_state"), ("denoised", "x->distractor_state"), ("denoised", "y->agent_state"),
                ("denoised", "y->distractor_state"), ("dreamer", "x->agent_state"), ("dreamer", "x->distractor_state")]
    variants = list(summary)
    readouts = [(method, key) for method, key in readouts if any(method in summary[v] for v in variants)]  # those run
    fig, ax = plt.subplots(figsize=(10.5, 4.2))
    width = 0.8 / len(readouts)
    table = np.array([[summary[v].get(method, {}).get("mean_probe", {}).get(key, np.nan) for v in variants]
                      for method, key in readouts], float).reshape(len(readouts), len(variants))
    finite = table[np.isfinite(table)]
    bottom = max(-0.5, min(-0.1, finite.min() - 0.05)) if finite.size else -0.1  # very negative R^2: clipped
    for k, (method, key) in enumerate(readouts):
        xs = np.arange(len(variants)) + k * width
        ax.bar(xs, np.maximum(table[k], bottom), width, label=f"{method} {key.replace('_state', '')}")
        for x, v in zip(xs, table[k]):
            if not np.isfinite(v):  # no read-out (e.g. no distractor in "noiseless")
                ax.text(x, 0.01, "n/a", ha="center", va="bottom", rotation=90, fontsize=7, color="0.4")
            elif v < bottom:  # bar clipped at the axis: print its value
                ax.text(x, bottom + 0.02, f"{v:.2g}", ha="center", va="bottom", fontsize=6,
                        bbox=dict(fc="white", ec="none", pad=0.5))
    ax.set_xticks(np.arange(len(variants)) + 0.4 - width / 2, variants)
    ax.set_xlim(-width, len(variants) - 0.2)  # every group's slots, those without a bar (n/a) included
    ax.set(xlabel="noise variant", ylabel="held-out R$^2$ of the ridge probe\n(1: perfect, 0: predicts the mean)",
           ylim=(bottom, 1.0))
    ax.set_title("Denoising probe: what each latent linearly encodes (mean over tasks and seeds)\n"
                 + textwrap.fill(f"{_budget(args)}; probe: {args.probe_train} train / {args.probe_test} test episodes",
                                 110), fontsize=9)
    ax.axhline(0, color="k", lw=0.5)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="latent -> target", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def factor_reconstructions(agent: DenoisedMDPAgent, observations, prev_actions, key) -> dict[str, np.ndarray]:
    """Filter one episode (observations ``[L, ...]``) with the posterior and decode each step three ways: from
    every factor (``all``), from x with y held at its episode mean (``x``: y's recurrent belief and state both
    replaced by their means over the episode's steps), and from y with x held so (``y``). Holding the belief too
    matters: it carries the episode's history, so a factor with only its state at the prior mean still shows most
    of what it encodes. Pixels come back as uint8 images; states in observation units."""
    m = agent.config.model
    if "y" not in m.factors:
        raise ValueError("factor_reconstructions needs a model with a y factor (Dreamer has x only)")
    model = agent.model
    states, _ = agent.posterior(jnp.asarray(observations)[None], jnp.asarray(prev_actions)[None], key)

    def held(f):  # factor f's belief and state at their means over the episode; the other factors as filtered
        return dict(states, **{k: jnp.broadcast_to(states[k].mean(axis=1, keepdims=True), states[k].shape)
                               for k in (f, f"h{f}")})

    out = {}
    for name, state in (("all", states), ("x", held("y")), ("y", held("x"))):
        decoded = model.apply(agent.model_params, all_features(m, state), method="decode")[0]
        if m.pixels:
            decoded = jnp.clip(jnp.round((decoded + 0.5) * 255.0), 0, 255).astype(jnp.uint8)
        else:
            decoded = decoded * agent.obs_std + agent.obs_mean
        out[name] = np.asarray(decoded)
    return out


def plot_reconstructions(path: Path, agent: DenoisedMDPAgent, loop: DMCOnlineConfig, frames: int, title: str,
                         budget: str):
    """Figure 5-7's picture: for ``frames`` evenly spaced steps of a deterministic evaluation episode, the
    observation, the reconstruction from all factors, from x alone and from y alone (the other factor's belief and
    state held at their episode means: :func:`factor_reconstructions`). Returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episode = run_episode(loop.make_env(), agent, seed=30_000_000 + loop.seed, greedy=True)
    decoded = factor_reconstructions(agent, episode["observations"], episode["prev_actions"], jax.random.PRNGKey(0))
    steps = np.linspace(0, len(episode["observations"]) - 1, frames + 2).astype(int)[1:-1]
    rows = [("observation", episode["observations"]), ("from x and y", decoded["all"]),
            ("from x alone\n(y held at episode mean)", decoded["x"]),
            ("from y alone\n(x held at episode mean)", decoded["y"])]
    fig, axes = plt.subplots(len(rows), frames, squeeze=False, figsize=(1.8 * frames + 1.0, 1.9 * len(rows) + 0.6))
    for i, (label, images) in enumerate(rows):
        for j, step in enumerate(steps):
            ax = axes[i, j]
            ax.imshow(images[step])
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(f"agent step {step}", fontsize=8)
            if j == 0:
                ax.set_ylabel(label, fontsize=8)
    fig.suptitle(f"Denoised MDP reconstructions, {title} (64x64 pixels)\n" + textwrap.fill(budget, 80), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return fig


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
