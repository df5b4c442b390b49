"""Offline QRL on discretised MountainCar: reproduce Table 4.1 and Figure 4-3 (dissertation section 4.3.3).

    python -m platonic_rl.benchmarks.mountaincar                      # quick: about a minute on 2 CPU cores (62 s at 213 GFLOP/s)
    python -m platonic_rl.benchmarks.mountaincar --scale cpu          # ~26 min on 2 CPU cores
    python -m platonic_rl.benchmarks.mountaincar --scale paper        # appendix C.3.1 (accelerator-sized)

Trains QRL single-goal, QRL multi-goal and the symmetric-l2 ablation (multi-goal) on the offline random-
actor dataset, then runs, from each of the 25,600 discrete start states at once, a 200-step greedy
episode towards (a) the top-of-hill goal set and (b) each of 9 goal states (reached = inside the 13 x 13
neighbourhood). Score per goal = 100 (mean return + 200) / (mean optimal return + 200), the optimal return
coming from exact breadth-first search; the 9-state score is the mean over the 9 goals. Also reports the
Spearman rank correlation between learned d(s, g) and the true optimal cost over all states that can
reach g. Saves ``results.json`` (with the exact command and config), ``values.png`` (ground truth vs
learned values as 160 x 160 images, like Figure 4-3) and per-method training metrics.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats
import tyro

from platonic_rl.agents.qrl import QRLAgent, QRLConfig
from platonic_rl.benchmarks import report
from platonic_rl.envs import mountaincar as mc
from platonic_rl.benchmarks.presets import mountaincar_presets
from platonic_rl.training.offline import train_offline

# 9 goal states spread over the state space, as (position bin, velocity bin) on the 160 x 160 grid:
# positions -0.86 / -0.29 / +0.27 x velocities -0.026 / +0.0004 / +0.027. Each is reachable exactly
# from 90% of the start states (the rest head fast into the right wall, where the per-step change of
# velocity is below half a velocity bin, so snapping freezes them), unlike goals at the velocity
# extremes, which few states can reach exactly on the grid.
GOAL_BINS = [(p, v) for p in (30, 80, 130) for v in (50, 80, 110)]

PAPER = {  # Table 4.1: (top of hill, 9 states), mean over 5 seeds
    "qrl_single": (97.69, None),
    "qrl_multi": (95.89, 85.55),
    "l2_multi": (96.13, 73.27),
    "oracle_dataset": (69.22, 75.89),
    "oracle_full": (100.0, 100.0),
}
LABELS = {
    "qrl_single": "QRL single-goal",
    "qrl_multi": "QRL multi-goal",
    "l2_multi": "QRL objective, symmetric l2, multi-goal",
    "oracle_dataset": "Oracle (dataset transitions)",
    "oracle_full": "Oracle (full dynamics)",
}
METHODS = ("qrl_single", "qrl_multi", "l2_multi")


# Scale-downs of C.3.1 (3x1024 MLPs, latent 256, IQE 16x32, batch 4096, 5e5 steps): quick (a smoke run), cpu (8-10
# min of training per method on 2 CPU cores), paper (C.3.1); see benchmarks.presets.mountaincar_presets.
PRESETS = mountaincar_presets()
COMPARABLE_SCALES = ("cpu", "paper")  # quick is a smoke run: its scores are not comparable to the paper's


@dataclasses.dataclass(frozen=True)
class Args:
    scale: Literal["quick", "cpu", "paper"] = "quick"
    """Preset for architecture and training length (see PRESETS)."""
    methods: tuple[Literal["qrl_single", "qrl_multi", "l2_multi"], ...] = METHODS
    seed: int = 0
    """Seeds the dataset, the agents and the batch sampler."""
    steps: int | None = None
    """Override the preset's number of gradient steps (the cosine schedule follows). At most the preset's
    log_every (500; 1000 for paper) -- then trained as one chunk -- or a multiple of it."""
    out_dir: str | None = None
    """Default: results/mountaincar/<scale>-seed<seed> (with --steps: <scale>-<steps>steps-seed<seed>)."""
    resume: bool = True
    overwrite: bool = False
    """Clear each method's run directory first (a fresh run into a used directory is refused otherwise)."""
    """Resume each method from its latest checkpoint in out_dir if one exists (a run directory holding a
    run with other settings is refused, naming the settings that differ)."""

    def default_out_dir(self) -> str:
        steps = "" if self.steps is None else f"-{self.steps}steps"
        return f"results/mountaincar/{self.scale}{steps}-seed{self.seed}"

    def __post_init__(self):
        if not self.methods:
            raise ValueError(f"--methods must list at least one of {list(METHODS)}, got none")
        if self.steps is not None:
            log_every = PRESETS[self.scale][1].log_every
            if self.steps < 1:
                raise ValueError(f"--steps must be >= 1 (or left out for the {self.scale!r} preset's "
                                 f"{PRESETS[self.scale][1].steps}), got {self.steps}")
            if self.steps > log_every and self.steps % log_every:
                raise ValueError(f"--steps must be at most {log_every} or a multiple of {log_every} (the "
                                 f"{self.scale!r} preset's log_every: updates per compiled chunk and metrics row), "
                                 f"got {self.steps}")


def method_config(method: str, base: QRLConfig) -> QRLConfig:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return dataclasses.replace(base, head="l2" if method == "l2_multi" else "iqe",
                               goal_mode="single" if method == "qrl_single" else "multi")


# ------------------------------------------------------------------------------------------- goals


@dataclasses.dataclass
class Goal:
    name: str
    observation: np.ndarray  # [3]
    target: np.ndarray  # [25600] bool: reached when inside
    value_target: np.ndarray  # [25600] bool: where the true cost d*(s, g) is measured to
    optimal_cost: np.ndarray  # [25600] cost to enter `target` (full dynamics)
    true_distance: np.ndarray  # [25600] cost to reach `value_target`


def make_goals(table: np.ndarray) -> list[Goal]:
    goals = []
    top = mc.goal_mask()
    cost_top = mc.cost_to_go(top, table)
    goals.append(Goal("top of hill", mc.GENERAL_GOAL, top, top, cost_top, cost_top))
    for kp, kv in GOAL_BINS:
        index = kp * mc.NUM_BINS + kv
        state = np.asarray(mc.state_from_index(index))
        near = mc.neighbourhood_mask(index)
        exact = np.zeros(mc.NUM_STATES, bool)
        exact[index] = True
        goals.append(Goal(f"({state[0]:+.2f}, {state[1]:+.3f})", np.asarray(mc.to_observation(state)),
                          near, exact, mc.cost_to_go(near, table), mc.cost_to_go(exact, table)))
    return goals


# -------------------------------------------------------------------------------------- evaluation


def oracle_policy(cost: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Greedy policy on a cost-to-go: argmin_a cost(next(s, a)); unknown transitions (-1) cost inf.
    Ties (and states where every action is unknown/unreachable) take the lowest action index."""
    next_cost = np.where(table >= 0, cost[np.maximum(table, 0)], np.inf)
    return np.argmin(next_cost, axis=1)


def evaluate(policy_fn, goals: list[Goal], table: np.ndarray, value_fn=None) -> dict:
    """Scores (and rank correlations if ``value_fn``) for a goal -> policy table function."""
    per_goal = []
    for goal in goals:
        policy = np.asarray(policy_fn(goal))
        row = dict(goal=goal.name, **mc.score_policy(policy, goal.target, table, goal.optimal_cost))
        if value_fn is not None:
            finite = np.isfinite(goal.true_distance)
            learned = np.asarray(value_fn(goal))
            row["spearman"] = float(scipy.stats.spearmanr(learned[finite], goal.true_distance[finite])[0])
        per_goal.append(row)
    states = per_goal[1:]
    summary = dict(top_of_hill=per_goal[0]["score"],
                   nine_states=float(np.mean([r["score"] for r in states])) if states else None)
    if value_fn is not None:
        summary["spearman_top_of_hill"] = per_goal[0]["spearman"]
        summary["spearman_nine_states_mean"] = (float(np.mean([r["spearman"] for r in states]))
                                                if states else None)
    return dict(summary=summary, per_goal=per_goal)


def agent_functions(agent: QRLAgent):
    obs = jnp.asarray(mc.to_observation(mc.all_states()))
    act = jax.jit(QRLAgent.act)
    dist = jax.jit(QRLAgent.distance)
    policy = lambda g: act(agent, obs, jnp.broadcast_to(jnp.asarray(g.observation), obs.shape))  # noqa
    value = lambda g: dist(agent, obs, jnp.broadcast_to(jnp.asarray(g.observation), obs.shape))  # noqa
    return policy, value


# ---------------------------------------------------------------------------------------- reporting


def format_table(results: dict) -> str:
    lines = ["Score = 100 * (mean return + 200) / (mean optimal return + 200) over all 25,600 start states,",
             "200-step greedy episodes, -1 per step until the goal (9 states: inside the 13x13 "
             "neighbourhood, mean over goals).",
             f"{'method':<42} {'top of hill':>12} {'(paper)':>8} {'9 states':>9} {'(paper)':>8} "
             f"{'rho top':>8} {'rho 9':>6}"]
    fmt = lambda x, w, p=2: f"{x:>{w}.{p}f}" if x is not None else f"{'-':>{w}}"  # noqa: E731
    for name, res in results.items():
        s = res["summary"]
        paper = PAPER[name]
        lines.append(f"{LABELS[name]:<42} {fmt(s['top_of_hill'], 12)} {fmt(paper[0], 8)} "
                     f"{fmt(s['nine_states'], 9)} {fmt(paper[1], 8)} "
                     f"{fmt(s.get('spearman_top_of_hill'), 8, 3)} {fmt(s.get('spearman_nine_states_mean'), 6, 3)}")
    lines.append("rho = Spearman rank correlation of learned d(s, g) with the true optimal cost "
                 "(states that can reach g).")
    return "\n".join(lines)


def _value_image(flat) -> np.ndarray:
    """A [25600] value per flat index ``k_pos * 160 + k_vel`` as a [160, 160] image: rows (array axis 0) are
    position bins, columns (axis 1) velocity bins; so with ``origin="lower"`` position runs up the y axis
    and velocity along the x axis. Unreachable (inf) becomes NaN (drawn white)."""
    img = np.asarray(flat, np.float64).reshape(mc.NUM_BINS, mc.NUM_BINS)
    return np.where(np.isfinite(img), img, np.nan)


def plot_values(path: Path, goals: list[Goal], learned: dict[str, list[np.ndarray]],
                title_extra: str | None = None):
    """Figure 4-3: d(s, g) over the 160 x 160 grid (x: velocity, y: position), one row per method with
    one colour scale and colour bar per row, one column per goal. ``title_extra`` (e.g. the scale and
    budget) is added to the title. Returns the (closed) Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    rows = [("ground truth", "optimal steps to goal\n(full dynamics)", [g.true_distance for g in goals])]
    rows += [(LABELS.get(k, k), "learned d(s, g)\n(model units)", v) for k, v in learned.items()]
    n_cols = len(goals)
    present = [[c < len(images) and images[c] is not None for c in range(n_cols)] for _, _, images in rows]
    fig, axes = plt.subplots(len(rows), n_cols + 1, squeeze=False, layout="constrained",
                             figsize=(1.45 * n_cols + 1.6, 1.6 * len(rows) + 0.9),
                             gridspec_kw=dict(width_ratios=[1.0] * n_cols + [0.07]))
    extent = (-mc.MAX_SPEED, mc.MAX_SPEED, mc.MIN_POSITION, mc.MAX_POSITION)
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    for r, (label, bar_label, images) in enumerate(rows):
        imgs = [_value_image(images[c]) if present[r][c] else None for c in range(n_cols)]
        values = np.concatenate([i[np.isfinite(i)] for i in imgs if i is not None] or [np.zeros(0)])
        vmin, vmax = (values.min(), values.max()) if values.size else (0.0, 1.0)
        mappable, first = None, True
        for c, (goal, img) in enumerate(zip(goals, imgs)):
            ax = axes[r, c]
            if img is None:
                ax.axis("off")
                continue
            mappable = ax.imshow(img, origin="lower", cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                                 extent=extent, interpolation="nearest")
            if goal.name == "top of hill":  # the goal set: position >= 0.5 and velocity >= 0
                ax.add_patch(Rectangle((mc.GOAL_VELOCITY, mc.GOAL_POSITION), mc.MAX_SPEED - mc.GOAL_VELOCITY,
                                       mc.MAX_POSITION - mc.GOAL_POSITION, fill=False, ec="r", lw=1.0, ls="--"))
            else:
                ax.plot(goal.observation[1], goal.observation[0], "r*", markersize=7)
            ax.set_xticks([-0.05, 0.0, 0.05], ["-0.05", "0", "0.05"])
            ax.set_yticks([-1.0, -0.5, 0.0, 0.5], ["-1", "-0.5", "0", "0.5"])
            ax.tick_params(labelsize=6, length=2, pad=1)
            # tick labels and axis labels on the outer panels: the first of each row, the lowest of each column
            if first:
                ax.set_ylabel("position", fontsize=7, labelpad=1)
                ax.annotate(textwrap.fill(label, 20, break_on_hyphens=False), xy=(0, 0.5), xycoords="axes fraction",
                            xytext=(-28, 0), textcoords="offset points", rotation=90, ha="right", va="center",
                            fontsize=7, fontweight="bold")
                first = False
            else:
                ax.tick_params(labelleft=False)
            if any(present[rr][c] for rr in range(r + 1, len(rows))):
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("velocity (per step)", fontsize=7, labelpad=1)
            if r == 0:
                obs = goal.observation
                ax.set_title("top of hill\npos >= 0.5, vel >= 0" if goal.name == "top of hill"
                             else f"goal: pos {obs[0]:+.2f}\nvel {obs[1]:+.3f}", fontsize=7)
        cax = axes[r, -1]
        if mappable is None:
            cax.axis("off")
            continue
        bar = fig.colorbar(mappable, cax=cax)
        bar.set_label(bar_label, fontsize=7)
        bar.ax.tick_params(labelsize=6)
    title = ("Distance to goal d(s, g) from every discrete state (160 x 160 bins; x: velocity, y: position; "
             "red star / dashed box: goal; white: goal unreachable; one colour scale per row)")
    fig.suptitle(title + (f"\n{title_extra}" if title_extra else ""), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


# -------------------------------------------------------------------------------------------- main


def run(args: Args) -> dict:
    base, train_config = PRESETS[args.scale]
    steps = train_config.steps if args.steps is None else args.steps  # Args checked: >= 1, fits log_every
    # Fewer steps than the preset's chunk: train them as one chunk (one metrics row); checkpoints then only at
    # the end unless the preset's interval is still a multiple of the chunk (TrainConfig requires that).
    log_every = min(train_config.log_every, steps)
    checkpoint_every = train_config.checkpoint_every
    if checkpoint_every % log_every:
        checkpoint_every = steps
    train_config = dataclasses.replace(train_config, steps=steps, seed=args.seed, resume=args.resume,
                                       overwrite=args.overwrite,
                                       log_every=log_every, checkpoint_every=checkpoint_every)
    base = dataclasses.replace(base, cosine_decay_steps=steps if base.cosine_decay_steps else None)
    out = Path(args.out_dir or args.default_out_dir())
    print(f"scale {args.scale!r}: {steps:,} steps of batch {train_config.batch_size} per method, seed {args.seed}; "
          f"saving to {out}")
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.time()
    dataset = mc.generate_dataset(args.seed)
    table = mc.transition_table()
    goals = make_goals(table)
    data_table = mc.dataset_table(dataset)
    print(f"dataset: {len(dataset) - dataset.num_goal_entries} transitions from {dataset.num_episodes} "
          f"episodes + {dataset.num_goal_entries} goal-entry transitions (paper: 199,888 + 240)")

    results, learned_values, timings = {}, {}, {}
    for method in args.methods:
        config = method_config(method, base)
        agent = QRLAgent.create(config, args.seed)
        start = time.time()
        agent, history = train_offline(agent, dataset.as_batch(), train_config, out / method,
                                       desc=method)
        timings[method] = time.time() - start
        policy_fn, value_fn = agent_functions(agent)
        # Single-goal QRL only knows the top-of-hill goal.
        method_goals = goals[:1] if method == "qrl_single" else goals
        results[method] = evaluate(policy_fn, method_goals, table, value_fn)
        results[method]["final_train_metrics"] = history[-1]
        learned_values[method] = [np.asarray(value_fn(g)) if g in method_goals else None for g in goals]

    oracle = {}
    for key, tbl in (("oracle_dataset", data_table), ("oracle_full", table)):
        oracle[key] = evaluate(lambda g, tbl=tbl: oracle_policy(mc.cost_to_go(g.target, tbl), tbl),
                               goals, table)
    results.update(oracle)

    ran = f"{steps:,} steps x batch {train_config.batch_size}, seed {args.seed}"
    budget = f"scale {args.scale}: {ran}"
    if args.scale in COMPARABLE_SCALES:
        note = f"Scale {args.scale!r} ran ({ran}; the paper: 500,000 steps x batch 4096)."
    else:
        note = (f"Scale {args.scale!r} ran ({ran}): a smoke run, NOT comparable to the "
                "paper's numbers; only --scale cpu or paper are.")
    record = dict(
        train_config=dataclasses.asdict(train_config),
        agent_configs={m: dataclasses.asdict(method_config(m, base)) for m in args.methods},
        dataset=dict(transitions=len(dataset) - dataset.num_goal_entries,
                     goal_entries=dataset.num_goal_entries, episodes=dataset.num_episodes),
        goal_bins=GOAL_BINS, paper_table_4_1=PAPER, results=results, train_seconds=timings)
    plots = {"values.png": lambda path: plot_values(path, goals, learned_values, title_extra=budget)}
    return report.save_run(out, "platonic_rl.benchmarks.mountaincar", args, record,
                           table=format_table(results) + "\n" + note, plots=plots, total_seconds=time.time() - t0)


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
