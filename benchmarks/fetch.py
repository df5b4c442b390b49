"""Online goal-conditioned RL on Fetch: QRL vs Contrastive RL, GCBC and DDPG+HER (Figure 4-5).

    python -m platonic_rl.benchmarks.fetch --env reach --agents qrl crl ddpg_her --seeds 0 1 2 --env-steps 20000

Each (agent, seed) runs the shared online loop (:mod:`platonic_rl.training.goal_online`) with the C.3.3 schedule: 200 random
prefill episodes, then cycles of 10 rollouts + 500 gradient steps, evaluation of 50 episodes every 2000
env steps. Saves ``results.json`` (command, configs, per-seed curves), ``curves.png`` (success rate vs env
steps, mean and min-max over seeds, smoothed by a sliding window of 5 evaluations as in the paper) and
prints the final success rates and the sample-efficiency ratio of C.3.3: the env steps at which QRL's
smoothed success first exceeds a peer's final smoothed success, divided into the peer's budget. A
zero-action reference (a policy that never moves, on the same evaluation episodes) is measured, plotted and
tabled with them: the rate of episodes that start solved, below which nothing has been learned.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Literal

import numpy as np
import tyro

from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.ddpg_her import DDPGHERAgent, DDPGHERConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl_policies import PolicySpec
from platonic_rl.training.evaluation import metric_name
from platonic_rl.training.goal_online import OnlineConfig, evaluate, train_online
from platonic_rl.training.schedule import eval_seed
from platonic_rl.agents.qrl_continuous import IMAGE_DEFAULTS, QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import FETCH_QRL_PRESETS
from platonic_rl.envs import fetch
from platonic_rl.training.run import MetricsLog

AgentName = Literal["qrl", "crl", "gcbc", "ddpg_her", "ddpg_her_mrn", "ddpg_her_iqe"]


def agent_config(name: str, task: str, qrl_preset: str = "paper", obs: str = "state"):
    """(agent class, agent config, online-loop overrides) with the settings of C.3.3."""
    spec = fetch.TASKS[task]
    obs_dim, goal_dims = spec.obs_dim, spec.goal_dims
    if obs == "image" and name != "qrl":
        raise ValueError(f"image observations are implemented for the QRL agent only, not {name!r}; "
                         "use --obs state for the peers")
    if name == "qrl":
        image = IMAGE_DEFAULTS if obs == "image" else {}
        config = QRLContinuousConfig(obs_dim=obs_dim, action_dim=fetch.ACTION_DIM,
                                     **{**FETCH_QRL_PRESETS[qrl_preset], **image})
        return QRLContinuousAgent, config, {}
    if name == "crl":  # the original: no exploration noise, no entropy term for states
        return CRLAgent, CRLConfig(obs_dim=obs_dim, action_dim=fetch.ACTION_DIM), dict(exploration_noise=0.0)
    if name == "gcbc":
        return GCBCAgent, GCBCConfig(obs_dim=obs_dim, action_dim=fetch.ACTION_DIM), {}
    if name.startswith("ddpg_her"):
        critic = {"ddpg_her": "mlp", "ddpg_her_mrn": "mrn", "ddpg_her_iqe": "iqe"}[name]
        config = DDPGHERConfig(obs_dim=obs_dim, action_dim=fetch.ACTION_DIM, goal_dims=goal_dims, critic=critic)
        return DDPGHERAgent, config, dict(p_future=0.8)  # HER's "future" strategy, k = 4
    raise ValueError(f"unknown agent {name!r}")


def make_agent(name: str, task: str, seed: int, qrl_preset: str = "paper", obs: str = "state"):
    """(agent, online-loop overrides) with the settings of C.3.3."""
    cls, config, overrides = agent_config(name, task, qrl_preset, obs)
    return cls.create(config, seed), overrides


@dataclasses.dataclass(frozen=True)
class Args:
    env: Literal["reach", "push", "slide"] = "reach"
    agents: tuple[AgentName, ...] = ("qrl", "crl", "ddpg_her")
    obs: Literal["state", "image"] = "state"
    seeds: tuple[int, ...] = (0,)
    env_steps: int = 20_000
    updates_per_cycle: int | None = None
    """Gradient steps per 10 rollouts; None: 500 for states, 125 for images (C.3.3)."""
    updates_per_call: int | None = None
    """Gradient steps per compiled call; None: the loop's default (``OnlineConfig.updates_per_call``: one call
    per cycle, one per step for images on CPU, where XLA runs convs in loops ~7x slower)."""
    batch_size: int = 256
    """Gradient-step batch size (C.3.3: 256)."""
    qrl_preset: Literal["paper", "cpu"] = "paper"
    """QRL network sizes: "paper" (C.3.3) or "cpu" (256-wide layers, IQE 16 x 32; ~4x faster)."""
    qrl_lookahead: tuple[int, ...] = ()
    """QRL's runs also evaluate the latent lookahead (agents.qrl_policies.LatentLookahead) holding each candidate
    k steps, for each k given, on the actor's evaluation episodes: rows ``qrl_lookahead_k<k>``."""
    qrl_lookahead_grid: int = 5
    """The lookahead's candidates per action dimension (Fetch's 4: 5^4 = 625 grid actions, and the actor's mode)."""
    out_dir: str = "results/fetch"
    add_reference_to: str | None = None
    """Instead of training: add the zero-action reference curve to the results.json in this directory (a run
    saved before the reference existed) and redraw its plot."""
    overwrite: bool = False
    """Clear each (agent, seed) run directory first (rerunning otherwise resumes, or refuses other settings)."""
    from_logs: bool = False
    """Instead of training: the table and plot of the evaluations already logged in ``out_dir``'s run
    directories (a run in progress or stopped early; every seed cut to the evaluations all seeds have)."""

    def __post_init__(self):
        if not self.agents:
            raise ValueError(f"--agents must name at least one agent (of {list(AgentName.__args__)}), got none")
        if not self.seeds:
            raise ValueError("--seeds must list at least one seed, got none")
        prefill = OnlineConfig().prefill_env_steps  # the loop's default prefill, which this CLI does not change
        trains = not (self.from_logs or self.add_reference_to)  # the report modes only read runs back
        if trains and self.env_steps <= prefill:
            raise ValueError(f"--env-steps must be greater than the {prefill} env steps of random prefill "
                             f"({OnlineConfig.prefill_episodes} episodes x {fetch.EPISODE_LENGTH} steps), else "
                             f"nothing is trained or evaluated; got {self.env_steps}")
        cycle = OnlineConfig.rollouts_per_cycle * fetch.EPISODE_LENGTH
        if trains and (self.env_steps - prefill) % cycle:
            raise ValueError(f"--env-steps must be the {prefill} env steps of random prefill plus whole cycles of "
                             f"{cycle} env steps ({OnlineConfig.rollouts_per_cycle} episodes x {fetch.EPISODE_LENGTH} "
                             f"steps), else the last cycle runs past the budget; got {self.env_steps}")
        if any(not isinstance(k, int) or k < 1 for k in self.qrl_lookahead):
            raise ValueError(f"--qrl-lookahead must be positive ints (steps each action is held), got "
                             f"{self.qrl_lookahead}")
        if self.qrl_lookahead and "qrl" not in self.agents:
            raise ValueError("--qrl-lookahead evaluates QRL's lookahead: --agents must include qrl")
        if self.qrl_lookahead_grid < 2:
            raise ValueError(f"--qrl-lookahead-grid must be >= 2, got {self.qrl_lookahead_grid}")
        for name in ("batch_size", "updates_per_cycle", "updates_per_call"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def lookahead_policies(args: Args) -> dict:
    """QRL's evaluation policies of ``--qrl-lookahead``: ``{"lookahead_k<k>": PolicySpec}``."""
    return {f"lookahead_k{k}": PolicySpec.of("lookahead", hold_steps=k, grid_size=args.qrl_lookahead_grid)
            for k in args.qrl_lookahead}


def smooth(values: np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average over up to ``window`` evaluations."""
    values = np.asarray(values, float)
    return np.array([values[max(0, i - window + 1):i + 1].mean() for i in range(len(values))])


def efficiency_ratio(qrl_steps, qrl_success, peer_steps, peer_success) -> float | None:
    """Peer's budget / env steps at which QRL's smoothed success first exceeds the peer's final one."""
    target = peer_success[-1]
    above = np.flatnonzero(np.asarray(qrl_success) > target)
    return None if not len(above) else float(peer_steps[-1] / qrl_steps[above[0]])


def zero_action_success(task: str, env_steps: list[int], episodes: int = 50) -> list[float]:
    """Success of the policy that never moves, evaluated like the agents (same episodes and goals at each
    evaluation step): the rate of episodes that start already solved, which no agent needs to learn. Image
    runs share it (same simulator, same seeds)."""
    if episodes < 1:
        raise ValueError(f"zero_action_success: episodes must be >= 1, got {episodes}")
    env = fetch.adapter(fetch.make_vector_env(task, min(episodes, 10)), task)
    still = lambda o, g: np.zeros((len(o), fetch.ACTION_DIM), np.float32)  # noqa: E731
    try:
        return [evaluate(still, env, episodes, seed=eval_seed(step)) for step in env_steps]
    finally:
        env.close()


NOT_LEARNED_MARGIN = 0.05
"""A peer whose final success is within this of the zero-action reference has learned nothing measurable;
its sample-efficiency ratio would compare noise, so it is not reported."""


def add_reference(record: dict, task: str) -> dict:
    """Put the zero-action curve (raw and smoothed) into a results record's summary, then QRL's efficiency
    ratio against every peer -- except peers not ``NOT_LEARNED_MARGIN`` above the reference."""
    summary = record["summary"]
    steps = next(iter(record["curves"].values()))[0]["env_steps"]
    raw = zero_action_success(task, steps)
    reference = float(smooth(raw)[-1])
    summary["zero_action"] = dict(final_success=reference, env_steps=steps, success=raw,
                                  smoothed_mean=smooth(raw).tolist())
    qrl = summary.get("qrl")
    for name, s in summary.items():
        if qrl is None or name in ("qrl", "zero_action") or name.startswith("qrl_"):
            continue
        if s["final_success"] < reference + NOT_LEARNED_MARGIN:
            s.update(qrl_sample_efficiency_ratio=None, ratio_undefined="peer not above the zero-action reference")
        else:
            s["qrl_sample_efficiency_ratio"] = efficiency_ratio(qrl["env_steps"], qrl["smoothed_mean"],
                                                                s["env_steps"], s["smoothed_mean"])
    return record


def run(args: Args) -> dict:
    updates = args.updates_per_cycle or (125 if args.obs == "image" else 500)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    curves, configs = {}, {}
    for name in args.agents:
        curves[name] = []
        for seed in args.seeds:
            cls, agent_cfg, overrides = agent_config(name, args.env, args.qrl_preset, args.obs)
            config = OnlineConfig(task=args.env, obs=args.obs, env_steps=args.env_steps, seed=seed,
                                  updates_per_cycle=updates, updates_per_call=args.updates_per_call,
                                  batch_size=args.batch_size, overwrite=args.overwrite, **overrides)
            configs[name] = dict(agent=dataclasses.asdict(agent_cfg), loop=dataclasses.asdict(config))
            start, run_dir = time.time(), out / f"{name}_seed{seed}"
            policies = lookahead_policies(args) if name == "qrl" else {}
            if args.from_logs:
                history = logged_history(run_dir)
            else:
                _, history = train_online(cls.create(agent_cfg, seed), config, run_dir, desc=f"{name} seed {seed}",
                                          eval_policies=policies)
            evals = [r for r in history if "eval_success" in r]
            missing = [p for p in policies if evals and metric_name(p) not in evals[-1]]
            if missing:
                raise ValueError(f"--qrl-lookahead: {run_dir} was trained without evaluating {missing}; drop "
                                 "--qrl-lookahead to report it, or train it with that flag")
            # the cycles' wall clock without the evaluation policies' episodes, so that agents' times compare
            cycle_times = [None if r.get("cycle_seconds") is None else r["cycle_seconds"]
                           - r.get("eval_policies_seconds", 0.0) for r in history]
            curves[name].append(dict(seed=seed, env_steps=[r["env_steps"] for r in evals],
                                     success=[r["eval_success"] for r in evals],
                                     seconds=None if args.from_logs else time.time() - start,
                                     # all cycles, across resumes (None: some were logged before the field)
                                     training_seconds=None if None in cycle_times else sum(cycle_times)))
            for policy in policies:  # the same runs' evaluations by each policy, as rows of their own
                curves.setdefault(f"qrl_{policy}", []).append(dict(
                    seed=seed, env_steps=[r["env_steps"] for r in evals],
                    success=[r[metric_name(policy)] for r in evals], seconds=None, training_seconds=None))
    if args.from_logs:  # runs in progress: keep the evaluations every seed of an agent has reached
        for runs in curves.values():
            common = min(len(r["env_steps"]) for r in runs)
            for r in runs:
                r.update(env_steps=r["env_steps"][:common], success=r["success"][:common])
    summary = {}
    for name, runs in curves.items():
        smoothed = np.mean([smooth(r["success"]) for r in runs], axis=0)
        summary[name] = dict(final_success=float(smoothed[-1]), env_steps=runs[0]["env_steps"],
                             smoothed_mean=smoothed.tolist())
    record = add_reference(dict(configs=configs, curves=curves, summary=summary), args.env)
    return report.save_run(out, "platonic_rl.benchmarks.fetch", args, record, table=format_table(args, summary),
                           plots=_curves_plot(args, record), total_seconds=time.time() - t0)


def logged_history(run_dir: Path) -> list[dict]:
    """The rows an online run has logged so far (``metrics.jsonl``), for ``--from-logs``."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"--from-logs: no metrics.jsonl in {str(run_dir)!r} (was this agent/seed run "
                                "with this --out-dir?)")
    rows = MetricsLog.read(run_dir)
    if not any("eval_success" in r for r in rows):
        raise ValueError(f"--from-logs: {path} has no evaluation yet")
    return rows


def _curves_plot(args: Args, record: dict) -> dict:
    """``curves.png`` of a results record, for :func:`report.save_run`."""
    return {"curves.png": lambda path: plot_curves(path, args, record["curves"], record["summary"].get("zero_action"))}


def add_reference_to(directory: str) -> dict:
    """``--add-reference-to DIR``: the zero-action curve for an earlier run's saved results."""
    path = Path(directory) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"--add-reference-to: no results.json in {directory!r}")
    record = json.loads(path.read_text())
    if "commit" not in record:  # saved before 02dfb5b, whose evaluations reset each batch with one int seed
        raise ValueError(f"--add-reference-to: {path} was saved before results recorded their commit (02dfb5b), "
                         "when the agents' evaluation episodes were seeded otherwise; the reference computed today "
                         "would not be on the same episodes. Add it with the code of that run's commit")
    known = {f.name for f in dataclasses.fields(Args)}
    args = Args(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["args"].items() if k in known})
    add_reference(record, args.env)
    return report.resave_run(path.parent, "platonic_rl.benchmarks.fetch", record,
                             table=format_table(args, record["summary"]), plots=_curves_plot(args, record),
                             command_key="reference_command")


def format_table(args: Args, summary: dict) -> str:
    reached = max((s["env_steps"][-1] for s in summary.values() if s.get("env_steps")), default=args.env_steps)
    budget = "" if reached == args.env_steps else f" (of a {args.env_steps} budget)"
    lines = [f"Fetch{args.env.capitalize()} ({args.obs}), {len(args.seeds)} seed(s), {reached} env steps{budget}, "
             f"QRL preset {args.qrl_preset!r}",
             f"{'agent':16s}{'final success (smoothed)':>26s}{'QRL sample-efficiency ratio':>30s}"]
    for name, s in summary.items():
        ratio = s.get("qrl_sample_efficiency_ratio")
        if name in ("qrl", "zero_action") or name.startswith("qrl_"):
            ratio_cell = "-"
        elif "ratio_undefined" in s:
            ratio_cell = "- (peer did not learn)"
        else:
            ratio_cell = "QRL never exceeds it" if ratio is None else f"{ratio:.2f}x"
        lines.append(f"{name:16s}{s['final_success']:26.3f}{ratio_cell:>30s}")
    return "\n".join(lines)


def _curves_title(args: Args, curves: dict) -> str:
    """Task, budget (env steps reached of the budget), seeds, batch, QRL preset and evaluation protocol."""
    reached = max((r["env_steps"][-1] for runs in curves.values() for r in runs if len(r["env_steps"])),
                  default=0)
    steps = (f"{args.env_steps:,} env steps" if reached >= args.env_steps
             else f"{reached:,} of {args.env_steps:,} env steps")
    preset = f", QRL preset {args.qrl_preset!r}" if "qrl" in curves else ""
    loop = {f.name: f.default for f in dataclasses.fields(OnlineConfig)}
    return (f"Fetch{args.env.capitalize()} ({args.obs}): {steps}, {len(args.seeds)} seed(s), batch {args.batch_size}"
            f"{preset}\nmarkers: evaluations ({loop.get('eval_episodes')} episodes / {loop.get('eval_every'):,} env "
            "steps); line: seed mean; band: seed min-max")


def plot_curves(path: Path, args: Args, curves: dict, reference: dict | None = None):
    """Success rate vs env steps (mean and min-max over seeds); returns the (closed) Figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for name, runs in curves.items():
        n = min(len(r["success"]) for r in runs)
        if n == 0:
            continue
        steps = np.asarray(runs[0]["env_steps"][:n])
        smoothed = np.array([smooth(r["success"][:n]) for r in runs])
        mean, low, high = smoothed.mean(0), smoothed.min(0), smoothed.max(0)
        (line,) = ax.plot(steps, mean, label=name, lw=2, marker="o", ms=5 if n <= 30 else 3)
        ax.fill_between(steps, low, high, alpha=0.2, color=line.get_color())
        if n == 1:  # a band needs two points: show the single evaluation's min-max as an error bar
            ax.errorbar(steps, mean, yerr=[mean - low, high - mean], fmt="none", ecolor=line.get_color(),
                        capsize=4)
    if reference is not None and len(reference["env_steps"]):
        ax.plot(reference["env_steps"], reference["smoothed_mean"], "k--", lw=1.2, marker=".", ms=5,
                label="zero action (episodes solved at the start)")
    ax.set(xlabel="environment steps", ylabel="success rate (fraction of evaluation episodes,\n"
           "trailing mean over 5 evaluations)", ylim=(-0.02, 1.02))
    ax.set_xlim(0, 1.03 * max([args.env_steps] + [r["env_steps"][-1] for runs in curves.values() for r in runs
                                                  if len(r["env_steps"])]))
    ax.set_title(_curves_title(args, curves), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def main():
    args = tyro.cli(Args)
    if args.add_reference_to:
        add_reference_to(args.add_reference_to)
    else:
        run(args)


if __name__ == "__main__":
    main()
