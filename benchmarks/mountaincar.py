"""Offline QRL on discretised MountainCar: reproduce Table 4.1 and Figure 4-3 (dissertation section 4.3.3).

    python -m benchmarks.mountaincar                      # quick: a few minutes on 2 CPU cores
    python -m benchmarks.mountaincar --scale cpu          # <= 30 min per method on 2 CPU cores
    python -m benchmarks.mountaincar --scale paper        # appendix C.3.1 (accelerator-sized)

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
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats
import tyro

from agents.qrl import QRLAgent, QRLConfig
from envs import mountaincar as mc
from qrl.train import TrainConfig, train_offline

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


# Every preset normalises MountainCar observations to about [-1, 1] inside the encoder.
PAPER_CONFIG = QRLConfig(obs_center=mc.OBS_CENTER, obs_scale=mc.OBS_SCALE)


def _scaled(width: int, depth: int, latent: int, components: int, dim_per_component: int,
            steps: int, lr: float = 5e-4) -> QRLConfig:
    hidden = (width,) * depth
    return dataclasses.replace(
        PAPER_CONFIG, encoder_hidden=hidden, latent_dim=latent, projector_hidden=hidden[:max(depth - 1, 1)],
        iqe_components=components, iqe_dim_per_component=dim_per_component,
        l2_dim=components * dim_per_component, dynamics_hidden=hidden, learning_rate=lr,
        cosine_decay_steps=steps)


# Scale-downs of C.3.1 (3x1024 MLPs, latent 256, IQE 16x32, batch 4096, 5e5 steps).
PRESETS = {
    "quick": (_scaled(128, 2, 64, 8, 16, 3_000, lr=1e-3), TrainConfig(steps=3_000, batch_size=256)),
    "cpu": (_scaled(256, 2, 128, 8, 16, 30_000, lr=1e-3), TrainConfig(steps=30_000, batch_size=256)),
    "paper": (PAPER_CONFIG, TrainConfig(steps=500_000, batch_size=4096, log_every=1000,
                                        checkpoint_every=50_000)),
}


@dataclasses.dataclass(frozen=True)
class Args:
    scale: Literal["quick", "cpu", "paper"] = "quick"
    """Preset for architecture and training length (see PRESETS)."""
    methods: tuple[Literal["qrl_single", "qrl_multi", "l2_multi"], ...] = METHODS
    seed: int = 0
    """Seeds the dataset, the agents and the batch sampler."""
    steps: int | None = None
    """Override the preset's number of gradient steps (the cosine schedule follows)."""
    out_dir: str = "results/mountaincar"
    resume: bool = True
    """Resume each method from its latest checkpoint in out_dir if one exists."""


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
    table_j = jnp.asarray(table)
    for goal in goals:
        policy = np.asarray(policy_fn(goal))
        returns = np.asarray(mc.greedy_returns(jnp.asarray(policy), jnp.asarray(goal.target), table_j))
        optimal = -np.minimum(goal.optimal_cost, mc.EVAL_EPISODE_STEPS)
        row = dict(goal=goal.name, score=mc.normalized_score(returns, optimal),
                   mean_return=float(returns.mean()), mean_optimal_return=float(optimal.mean()),
                   success_rate=float(np.mean(returns > -mc.EVAL_EPISODE_STEPS)))
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


def plot_values(path: Path, goals: list[Goal], learned: dict[str, list[np.ndarray]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [("ground truth", [g.true_distance for g in goals])] + [(LABELS[k], v) for k, v in learned.items()]
    fig, axes = plt.subplots(len(rows), len(goals), figsize=(1.6 * len(goals), 1.8 * len(rows)),
                             squeeze=False)
    for r, (label, images) in enumerate(rows):
        for c, (goal, image) in enumerate(zip(goals, images)):
            ax = axes[r, c]
            if image is None:
                ax.axis("off")
                continue
            img = np.asarray(image, np.float64).reshape(mc.NUM_BINS, mc.NUM_BINS)
            finite = np.isfinite(img)
            img = np.where(finite, img, np.nan)
            ax.imshow(img, origin="lower", cmap="viridis", aspect="auto",
                      extent=(-mc.MAX_SPEED, mc.MAX_SPEED, mc.MIN_POSITION, mc.MAX_POSITION))
            if goal.name != "top of hill":
                ax.plot(goal.observation[1], goal.observation[0], "r*", markersize=7)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(goal.name, fontsize=7)
            if c == 0:
                ax.set_ylabel(label, fontsize=6)
    fig.suptitle("Distance to goal d(s, g) from every state (x: velocity, y: position; yellow = far; "
                 "white = unreachable)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -------------------------------------------------------------------------------------------- main


def run(args: Args) -> dict:
    base, train_config = PRESETS[args.scale]
    steps = args.steps or train_config.steps
    train_config = dataclasses.replace(train_config, steps=steps, seed=args.seed, resume=args.resume)
    base = dataclasses.replace(base, cosine_decay_steps=steps if base.cosine_decay_steps else None)
    out = Path(args.out_dir)
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

    report = format_table(results)
    print(report)
    plot_values(out / "values.png", goals, learned_values)
    record = dict(
        command=" ".join(shlex.quote(a) for a in ["python", "-m", "benchmarks.mountaincar", *sys.argv[1:]]),
        args=dataclasses.asdict(args), train_config=dataclasses.asdict(train_config),
        agent_configs={m: dataclasses.asdict(method_config(m, base)) for m in args.methods},
        dataset=dict(transitions=len(dataset) - dataset.num_goal_entries,
                     goal_entries=dataset.num_goal_entries, episodes=dataset.num_episodes),
        goal_bins=GOAL_BINS, paper_table_4_1=PAPER, results=results, train_seconds=timings,
        total_seconds=time.time() - t0, jax_devices=[str(d) for d in jax.devices()], table=report)
    (out / "results.json").write_text(json.dumps(record, indent=1))
    print(f"saved {out / 'results.json'} and {out / 'values.png'}")
    return record


def main():
    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
