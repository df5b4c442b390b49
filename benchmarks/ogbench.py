"""OGBench's point mazes as an external table: QRL, Contrastive RL and GCBC trained offline on datasets generated on
this machine with OGBench's procedure (``envs.ogbench_maze``: oracle-subgoal controller, action noise 0.5), evaluated as
OGBench evaluates (its five tasks per maze, success rate in percent), beside OGBench's published numbers (Park et al.
2024, its main results table: 1M updates of batch 1024 with 3 x 512 networks, 8 seeds).

    python -m platonic_rl.benchmarks.ogbench --scale tiny --datasets pointmaze-medium-navigate-v0   # a smoke run
    python -m platonic_rl.benchmarks.ogbench --scale cpu --datasets pointmaze-medium-navigate-v0    # 3 seeds

Needs ``pip install -e ".[ogbench]"``. For each dataset: the dataset (generated once, cached), then for each method its
seeds trained as one ``jit(vmap(update))`` (:class:`~platonic_rl.agents.seeds.SeedStack`) by the offline loop in a
resumable run directory ``<out>/runs/<dataset>-<method>``, then OGBench's evaluation per seed. Each finished (dataset,
method) is stored in ``<out>/evals/`` and reused when the command is run again, so a long table is filled over
several calls. Inputs (observations and goals, both the point's (x, y)) are normalised by the maze's extent.

The methods, at every scale (only the sizes and budgets change):

Goals (``--goals``): ``ogbench`` (the default) samples them as OGBench does -- GCBC's and QRL's behaviour-cloning goals
uniformly among the episode's later states (OGBench's actor goals), QRL's critic goals random dataset states,
Contrastive RL's goals future states with Delta t ~ Geometric(0.01) (OGBench's value goals; the suite's Contrastive RL
trains its actor on the same goals); ``geometric`` draws every future-state goal with Delta t ~ Geometric(0.01), as the
suite's maze2d benchmark does (C.3.2). Contrastive RL is the same under both.

- ``qrl``: the suite's offline QRL settings (``docs/training.md``, "QRL settings to start from"): C.3.2's objective
  (phi offset 500, beta 0.01, transition weight 1, lambda lr 0.01, critic lr 5e-4), BC weight 0.05 on the dataset
  action's negative log-likelihood, no entropy term, the actor's distance term divided by its batch mean (as
  OGBench's QRL). OGBench's own QRL differs in: its actor's distance term also uses the future-state goals, a
  fixed-std actor with BC weight 0.0003, epsilon 0.05, layer norm, latent 512.
- ``crl``: Contrastive RL (+BC 0.05).
- ``gcbc``: goal-conditioned behaviour cloning.
- ``gcivl``: goal-conditioned implicit V-learning (``agents.gcivl``, OGBench's settings at the scale's sizes: expectile
  0.9, AWR temperature 10, layer norm), its value goals OGBench's (20% the state itself, 50% a future state with
  Delta t ~ Geometric(0.01), 30% random), its actor's goals a uniform future state (on the stitch datasets half of
  them a random state, as OGBench's commands set ``actor_p_randomgoal``).
- ``gciql``: goal-conditioned implicit Q-learning (``agents.gciql``, OGBench's settings at the scale's sizes:
  expectile 0.9, two critics, DDPG+BC with alpha 0.003 as its point-maze commands), GCIVL's goals.
- ``hiql``: hierarchical implicit Q-learning (``agents.hiql``, OGBench's settings at the scale's sizes: expectile 0.7,
  both AWR temperatures 3, subgoals 25 steps ahead, a 10-d subgoal representation), GCIVL's value goals, the high
  actor's goals a uniform future state.

On the giant maze OGBench's commands set the discount to 0.995: GCIVL's, GCIQL's and HIQL's gamma and the
geometric goals' (Delta t ~ Geometric(0.005)) follow it (``envs.ogbench_maze.DatasetSpec``).

Beside them, without learning, the table gives each maze's **straight-line reference**: a policy that heads straight
for the goal (the unit vector towards it). Sliding along the walls, it solves the tasks whose way does not turn back,
so a learned policy's score means something only above it.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Literal

import numpy as np

from platonic_rl import agents
from platonic_rl.agents.contract import host_policy
from platonic_rl.agents.qrl_policies import make_policy
from platonic_rl.agents.seeds import SeedStack
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import QRLPolicySettings
from platonic_rl.benchmarks.timing import matmul_peak
from platonic_rl.envs import ogbench_maze
from platonic_rl.training.offline import TrainConfig, load_dataset, train_seeds

METHODS = ("qrl", "qrl_lookahead", "qrl_waypoints", "qrl_waypoints_lookahead", "qrl_graph_waypoints",
           "qrl_graph_waypoints_lookahead", "crl", "gcbc", "gcivl", "gciql", "hiql")  # ROWS' keys
Method = Literal[METHODS]
TRAINED = ("qrl", "crl", "gcbc", "gcivl", "gciql", "hiql")  # what trains; the other rows act with QRL's trained seeds
Dataset = Literal["pointmaze-medium-navigate-v0", "pointmaze-large-navigate-v0", "pointmaze-medium-stitch-v0",
                  "pointmaze-large-stitch-v0", "pointmaze-giant-navigate-v0", "pointmaze-giant-stitch-v0",
                  "pointmaze-teleport-navigate-v0", "pointmaze-teleport-stitch-v0"]
DATASETS: tuple[Dataset, ...] = ("pointmaze-medium-navigate-v0", "pointmaze-large-navigate-v0",
                                 "pointmaze-medium-stitch-v0", "pointmaze-large-stitch-v0")  # the default --datasets
# Also generated and evaluated (named with --datasets): the giant maze and the teleport maze, whose teleporters send
# the point to one of three exits at random (OGBench's stochastic maze). Their published numbers are not in PAPER.


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: whose trained seeds it acts with, and with which policy of
    :mod:`platonic_rl.agents.qrl_policies` (``actor``: the trained agent itself)."""
    label: str
    trains: str
    policy: str = "actor"
    inner: str | None = None  # the waypoints' inner policy


ROWS: dict[str, Row] = {
    "qrl": Row("QRL (+BC)", "qrl"),
    "qrl_lookahead": Row("QRL, lookahead", "qrl", "lookahead"),
    "qrl_waypoints": Row("QRL, waypoints + actor", "qrl", "waypoints", "actor"),
    "qrl_waypoints_lookahead": Row("QRL, waypoints + lookahead", "qrl", "waypoints", "lookahead"),
    "qrl_graph_waypoints": Row("QRL, graph waypoints + actor", "qrl", "graph_waypoints", "actor"),
    "qrl_graph_waypoints_lookahead": Row("QRL, graph waypoints + lookahead", "qrl", "graph_waypoints", "lookahead"),
    "crl": Row("Contrastive RL (+BC)", "crl"),
    "gcbc": Row("GCBC", "gcbc"),
    "gcivl": Row("GCIVL", "gcivl"),
    "gciql": Row("GCIQL", "gciql"),
    "hiql": Row("HIQL", "hiql"),
}
assert tuple(ROWS) == METHODS

# OGBench's main results table (Park et al. 2024): success rate in percent, mean and std over 8 seeds (GCIVL's and
# HIQL's rows are not quoted: the table prints "-" for them).
PAPER = {
    "pointmaze-medium-navigate-v0": dict(gcbc=(9, 6), qrl=(82, 5), crl=(29, 7)),
    "pointmaze-large-navigate-v0": dict(gcbc=(29, 6), qrl=(86, 9), crl=(39, 7)),
    "pointmaze-medium-stitch-v0": dict(gcbc=(23, 18), qrl=(80, 12), crl=(0, 1)),
    "pointmaze-large-stitch-v0": dict(gcbc=(7, 5), qrl=(84, 15), crl=(0, 0)),
    # The giant maze's means as later papers reprint OGBench's table (its stds not reprinted: None), not checked
    # against OGBench's own table here.
    "pointmaze-giant-navigate-v0": dict(gcbc=(1, None), gcivl=(0, None), gciql=(0, None), qrl=(68, None),
                                        crl=(27, None), hiql=(46, None)),
    "pointmaze-giant-stitch-v0": dict(gcbc=(0, None), gcivl=(0, None), gciql=(0, None), qrl=(50, None),
                                      crl=(0, None), hiql=(0, None)),
}


def published(value: tuple) -> str:
    """A published ``(mean, std)`` of :data:`PAPER` as ``mean ± std``, or the mean alone where no std was published
    with it (``None``)."""
    mean, std = value
    return f"{mean}" if std is None else f"{mean} ± {std}"


@dataclasses.dataclass(frozen=True)
class Scale:
    """Everything a scale sets."""
    width: int                  # hidden width of every MLP (2 layers)
    qrl_updates: int
    other_updates: int          # Contrastive RL, GCBC, GCIVL, GCIQL and HIQL
    batch_size: int
    episodes_per_task: int      # OGBench: 50
    dataset_episodes: int | None  # None: OGBench's (1,000 navigate, 5,000 stitch)
    note: str
    log_every: int              # updates between logged rows, whatever the budget (so a run can be continued)
    policies: QRLPolicySettings = QRLPolicySettings()  # the deployable QRL rows' settings (MPPI's are unused here)


def scales() -> dict[str, Scale]:
    """``tiny``: a smoke run of a minute or so per dataset (20-episode datasets, width 32, a few hundred updates, 2
    episodes per task): NOT comparable to OGBench. ``cpu``: OGBench's datasets; 2 x 128 MLPs (QRL: latent 32, IQE
    16 x 16), batch 256, 20k updates for every method (1/200 of OGBench's samples), 50 episodes per task as OGBench.
    Measured on 2 cores, 3 seeds vmapped: QRL 79 ms per update (about 26 min), Contrastive RL 11 ms, GCBC 3 ms."""
    return {
        "tiny": Scale(32, 300, 300, 64, 2, 20, note="tiny: a smoke run, NOT comparable to OGBench's numbers",
                      log_every=10, policies=QRLPolicySettings(hold_steps=5, num_waypoints=100)),
        "cpu": Scale(128, 20_000, 20_000, 256, 50, None,
                     note="cpu: width 128, batch 256, 20k updates (1/200 of OGBench's samples); OGBench's numbers are "
                          "at 1M updates of batch 1024 with 3 x 512 networks", log_every=1000),
    }


@dataclasses.dataclass(frozen=True)
class Args:
    """OGBench's point mazes at a chosen scale (see the module docstring)."""
    scale: Literal["tiny", "cpu"] = "tiny"
    datasets: tuple[Dataset, ...] = DATASETS
    methods: tuple[Method, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    goals: Literal["ogbench", "geometric"] = "ogbench"
    """How future-state goals are drawn (see the module docstring)."""
    dataset_seed: int = 0
    qrl_updates: int | None = None
    """QRL's updates (default: the scale's, or the ladder's last); a QRL run directory with a smaller budget continues
    to this one."""
    qrl_ladder: tuple[int, ...] = ()
    """QRL budgets to evaluate on the way: QRL trains once, its run continued from budget to budget, and the selected
    QRL rows are evaluated at each (``evals/<dataset>-<row>@updates=<budget>.json``, with the critic's signals there)
    before the table's budget, ``--qrl-updates``, which must not be below the last."""
    other_updates: int | None = None
    """Contrastive RL's and GCBC's updates (default: the scale's)."""
    episodes_per_task: int | None = None
    """Evaluation episodes per task and seed (default: the scale's; OGBench: 50)."""
    hold_steps: int | None = None
    """The latent lookahead's k (default: the scale's ``policies``)."""
    reach: float | None = None
    """The waypoints' H, in steps of learned distance (default: the scale's)."""
    num_waypoints: int | None = None
    """Dataset states the waypoints are drawn from (default: the scale's)."""
    data_root: str | None = None
    """Where generated datasets are cached (default $PLATONIC_RL_DATA/ogbench or ~/.cache/platonic_rl/ogbench)."""
    out_dir: str | None = None
    """Default: results/ogbench/<scale>."""
    overwrite: bool = False
    """Train and evaluate every selected (dataset, method) afresh instead of resuming or reusing it."""

    def __post_init__(self):
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds must be distinct, got {self.seeds}")
        if self.reach is not None and not self.reach > 0:
            raise ValueError(f"--reach must be > 0 (steps of learned distance), got {self.reach}")
        if any(not isinstance(b, int) or b < 1 for b in self.qrl_ladder) or list(self.qrl_ladder) != sorted(
                set(self.qrl_ladder)):
            raise ValueError(f"--qrl-ladder must be increasing positive budgets, got {self.qrl_ladder}")
        if self.qrl_ladder and self.qrl_updates is not None and self.qrl_updates < self.qrl_ladder[-1]:
            raise ValueError(f"--qrl-updates={self.qrl_updates} is below the ladder's last budget "
                             f"{self.qrl_ladder[-1]}: the run continues through the ladder and cannot go back")
        if self.qrl_ladder and not any(ROWS[m].trains == "qrl" for m in self.methods):
            raise ValueError("--qrl-ladder evaluates QRL's rows: --methods must include one (qrl, qrl_lookahead, ...)")
        log_every = scales()[self.scale].log_every
        for name, budgets in (("qrl-updates", [self.qrl_updates]), ("other-updates", [self.other_updates]),
                              ("qrl-ladder", self.qrl_ladder)):
            if any(b is not None and b > 0 and b % log_every for b in budgets):
                raise ValueError(f"--{name} must be multiples of the {self.scale} scale's {log_every} updates between "
                                 f"logged rows (so a run can be continued to a larger budget), got {budgets}")
        for name in ("qrl_updates", "other_updates", "episodes_per_task", "hold_steps", "num_waypoints"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if not self.datasets or not self.methods:
            raise ValueError("--datasets and --methods need at least one entry each")


@dataclasses.dataclass(frozen=True)
class Trained:
    """How one trained method is built: its agent in :data:`platonic_rl.agents.REGISTRY` (and preset), its config's
    sizes and settings at a scale's width (besides the 2-d observations and actions) and the goals it learns from:
    ``qrl`` (critic goals random states, behaviour-cloning goals future states), ``future`` (future states drawn as
    value goals), ``actor`` (future states drawn as actor goals), ``value`` (OGBench's value goals and actor goals:
    GCIVL's). ``gamma``: the config's discount is the dataset's."""
    agent: str
    fields: Callable[[tuple[int, int], int], dict]  # (hidden widths, width) -> config fields
    goals: Literal["qrl", "future", "actor", "value"]
    preset: str | None = None
    gamma: bool = False


TRAINED_METHODS: dict[str, Trained] = {
    "qrl": Trained("qrl_continuous", lambda hidden, width: dict(  # the registry's offline preset at the scale's sizes
        encoder_hidden=hidden, latent_dim=max(width // 4, 16), projector_hidden=(width,), dynamics_hidden=hidden,
        actor_hidden=hidden), "qrl", preset="offline"),
    "crl": Trained("crl", lambda hidden, _: dict(hidden=hidden, repr_dim=16, actor_hidden=hidden, bc_weight=0.05),
                   "future"),
    "gcbc": Trained("gcbc", lambda hidden, _: dict(hidden=hidden), "actor"),
    "gcivl": Trained("gcivl", lambda hidden, _: dict(value_hidden=hidden, actor_hidden=hidden), "value", gamma=True),
    # OGBench's point-maze commands set GCIQL's DDPG+BC alpha to 0.003
    "gciql": Trained("gciql", lambda hidden, _: dict(value_hidden=hidden, actor_hidden=hidden, bc_alpha=0.003),
                     "value", gamma=True),
    "hiql": Trained("hiql", lambda hidden, _: dict(value_hidden=hidden, actor_hidden=hidden), "value", gamma=True),
}
assert tuple(TRAINED_METHODS) == TRAINED


def goal_settings(kind: str, goals: str, discount: float, actor_random_goals: float) -> dict:
    """The offline sampler's settings (:class:`~platonic_rl.envs.replay.SegmentGoalSampler`) for goals of ``kind``
    (:class:`Trained`), with ``--goals`` and the dataset's discount and random actor goals; the discount is named only
    where it is not the sampler's default 0.99 and only for the draws that use it (geometric ones)."""
    actor_future = "uniform" if goals == "ogbench" else "geometric"
    geometric = {} if discount == 0.99 else dict(discount=discount)
    actor_geometric = geometric if actor_future == "geometric" else {}
    if kind == "qrl":
        return dict(p_future=0.0, bc_goals=True, bc_future=actor_future, **actor_geometric)
    if kind == "future":
        return dict(p_future=1.0, **geometric)
    if kind == "actor":
        return dict(p_future=1.0, future=actor_future, **actor_geometric)
    return dict(p_future=0.5, p_current=0.2, bc_goals=True, bc_future=actor_future, **geometric,
                **(dict(bc_p_random=actor_random_goals) if actor_random_goals else {}))


def method_setup(method: str, scale: Scale, updates: int, goals: str = "ogbench", discount: float = 0.99,
                 actor_random_goals: float = 0.0):
    """(agent class, config, train config, sampler settings) of one trained method (:data:`TRAINED_METHODS`) at one
    scale and goal sampling; ``discount``: OGBench's for the dataset
    (:attr:`~platonic_rl.envs.ogbench_maze.DatasetSpec.discount`), the value methods' gamma and the
    truncated-geometric goals'; ``actor_random_goals``: the share of GCIVL's, GCIQL's and HIQL's actor goals that are
    random states (:attr:`~platonic_rl.envs.ogbench_maze.DatasetSpec.actor_random_goals`: OGBench's 0.5 on stitch
    datasets; QRL, Contrastive RL and GCBC keep the goals the module docstring gives)."""
    if method not in TRAINED_METHODS:
        raise ValueError(f"method must be one of {TRAINED} (the trained ones), got {method!r}")
    if goals not in ("ogbench", "geometric"):
        raise ValueError(f"goals must be 'ogbench' or 'geometric', got {goals!r}")
    if not 0.0 < discount < 1.0:
        raise ValueError(f"discount must be in (0, 1), got {discount}")
    if not 0.0 <= actor_random_goals <= 1.0:
        raise ValueError(f"actor_random_goals must be in [0, 1], got {actor_random_goals}")
    if updates % scale.log_every:
        raise ValueError(f"{method}'s budget of {updates} updates must be a multiple of the scale's {scale.log_every} "
                         "updates between logged rows (--qrl-updates, --qrl-ladder, --other-updates)")
    train = TrainConfig(steps=updates, batch_size=scale.batch_size, log_every=scale.log_every,
                        checkpoint_every=scale.log_every * max(updates // (4 * scale.log_every), 1), progress=True)
    entry = TRAINED_METHODS[method]
    config = agents.make_config(entry.agent, preset=entry.preset, obs_dim=2, action_dim=2,
                                **entry.fields((scale.width,) * 2, scale.width),
                                **(dict(discount=discount) if entry.gamma else {}))
    sampling = goal_settings(entry.goals, goals, discount, actor_random_goals)
    if hasattr(config, "subgoal_steps"):  # HIQL: its low actor's goals k steps ahead
        sampling["subgoal_steps"] = config.subgoal_steps
    return agents.REGISTRY[entry.agent].agent, config, train, sampling


def normalised(data: dict, center: np.ndarray, half: np.ndarray) -> dict:
    out = dict(data)
    for key in ("observations", "next_observations"):
        out[key] = ((data[key] - center) / half).astype(np.float32)
    return out


def policy_settings(row: Row, scale: Scale, args: Args) -> dict:
    """The settings of a row's policy: the scale's ``policies``, overridden by the arguments."""
    if row.policy == "actor":
        return {}
    p = dataclasses.replace(scale.policies, **{k: v for k, v in dict(
        hold_steps=args.hold_steps, reach=args.reach, num_waypoints=args.num_waypoints).items() if v is not None})
    return p.policy_kwargs(row.policy, row.inner)


def policy_of(agent, center: np.ndarray, half: np.ndarray, row: Row = ROWS["qrl"], settings: dict | None = None,
              dataset_states: np.ndarray | None = None):
    """A host policy for evaluation: the row's policy of the trained agent (deterministic) on normalised observations
    and goals."""
    policy = agent if row.policy == "actor" else make_policy(row.policy, agent, dataset_states, **(settings or {}))
    return host_policy(policy, lambda x: ((np.asarray(x) - center) / half).astype(np.float32))


def straight_line(observations: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """The no-learning reference: full speed towards the goal."""
    direction = np.asarray(goals, np.float64) - np.asarray(observations, np.float64)
    return direction / (np.linalg.norm(direction, axis=-1, keepdims=True) + 1e-6)


def straight_line_reference(dataset: str, episodes: int, out: Path) -> dict:
    """The straight-line policy's success on the dataset's maze (seed 0), kept per maze in ``<out>/evals/``."""
    env_name = ogbench_maze.get_spec(dataset).env_name
    def measure():
        result = ogbench_maze.evaluate(straight_line, dataset, episodes, seed=0)
        return dict(env=env_name, episodes_per_task=episodes, success=result["success"],
                    task_success=result["task_success"])

    return report.cached_record(out / "evals" / f"{env_name}-straight-line-{episodes}.json", measure)


def signals(history: list[dict]) -> dict:
    """The last logged row's scalar metrics, averaged over seeds (the convergence signals)."""
    if not history:
        return {}
    return {k: float(np.mean(v)) for k, v in history[-1].items() if np.size(v) >= 1 and np.ndim(v) <= 1}


def run_name(dataset: str, method: str, goals: str) -> str:
    """``<dataset>-<method>``, with ``-geometric`` for the non-default goal sampling of the methods it changes."""
    return f"{dataset}-{method}" + ("-geometric" if goals == "geometric" and method != "crl" else "")


def updates_of(method: str, scale: Scale, args: Args) -> int:
    """The table's budget of a trained method: QRL's ``--qrl-updates``, else the ladder's last, else the scale's."""
    if method == "qrl":
        return args.qrl_updates or (args.qrl_ladder[-1] if args.qrl_ladder else scale.qrl_updates)
    return args.other_updates or scale.other_updates


def train_one(dataset: str, method: str, data: dict, scale: Scale, args: Args, out: Path) -> tuple[SeedStack, dict]:
    """One trained method's seeds on one dataset (or its finished run read back) and what its record keeps of the
    training."""
    updates = updates_of(method, scale, args)
    spec = ogbench_maze.get_spec(dataset)
    agent_class, config, train, sampling = method_setup(method, scale, updates, args.goals, spec.discount,
                                                        spec.actor_random_goals)
    peak = matmul_peak() / 1e9  # beside the training's seconds: machines differ up to four times
    t = time.time()
    stack, history = train_seeds(agent_class, config, args.seeds, data,
                                 dataclasses.replace(train, overwrite=args.overwrite), sampling,
                                 run_dir=out / "runs" / run_name(dataset, method, args.goals),
                                 desc=f"{dataset} {method} x{len(args.seeds)} seeds")
    return stack, dict(goals=args.goals, sampler=sampling, updates=updates, batch_size=train.batch_size,
                       train_seconds=time.time() - t, matmul_peak_gflops=peak, signals=signals(history),
                       config=dataclasses.asdict(config))


def evaluate_row(dataset: str, method: str, stack: SeedStack, training: dict, data: dict, extent, scale: Scale,
                 args: Args) -> dict:
    """Every seed's OGBench evaluation of one row; the record of the (dataset, row)."""
    row = ROWS[method]
    settings = policy_settings(row, scale, args)
    episodes = args.episodes_per_task or scale.episodes_per_task
    per_seed, t = [], time.time()
    for i, seed in enumerate(args.seeds):
        policy = policy_of(stack.agent(i), *extent, row, settings, data["observations"])
        result = ogbench_maze.evaluate(policy, dataset, episodes, seed=seed)
        per_seed.append(dict(seed=seed, success=result["success"], task_success=result["task_success"]))
    success = [r["success"] for r in per_seed]
    return dict(dataset=dataset, method=method, trained=row.trains, policy=row.policy, policy_settings=settings,
                **training, episodes_per_task=episodes, per_seed=per_seed, mean=float(np.mean(success)),
                std=float(np.std(success)), eval_seconds=time.time() - t)


def format_table(results: dict, args: Args, scale: Scale, references: dict | None = None) -> str:
    references = references or {}
    lines = [f"OGBench point mazes, success rate (%) over 5 tasks x {args.episodes_per_task or scale.episodes_per_task} "
             f"episodes, mean ± std over seeds {list(args.seeds)} (OGBench's published numbers in brackets, 8 seeds)",
             f"scale {args.scale}: {scale.note}; goals: {args.goals}",
             f"{'dataset':<30}" + "".join(f"{ROWS[m].label:>30}" for m in args.methods) + f"{'straight line':>15}"]
    for dataset in args.datasets:
        cells = []
        for method in args.methods:
            r = results.get(dataset, {}).get(method)
            paper = PAPER.get(dataset, {}).get(method)
            ours = f"{r['mean']:.1f} ± {r['std']:.1f}" if r else "--"
            cells.append(f"{ours} ({published(paper)})" if paper else ours)
        reference = references.get(dataset)
        lines.append(f"{dataset:<30}" + "".join(f"{c:>30}" for c in cells)
                     + (f"{reference['success']:>15.1f}" if reference else f"{'--':>15}"))
    return "\n".join(lines)


def evaluated(path: Path, row: Row, updates: int, scale: Scale, args: Args) -> dict | None:
    """The record at ``path`` if it holds this row at this budget and these policy settings (and ``--overwrite`` is
    off), else None (made with other settings: evaluated again)."""
    record = None if args.overwrite else report.read_record(path)
    return record if record is not None and is_current(record, row, updates, scale, args) else None


def is_current(record: dict, row: Row, updates: int, scale: Scale, args: Args) -> bool:
    """Whether a row's record was made at this budget with these policy settings."""
    return record.get("policy_settings", {}) == policy_settings(row, scale, args) and record.get("updates") == updates


def trained_updates(run_dir: Path) -> int:
    """The latest checkpointed update of a run directory (its ``checkpoints/<step>/``), 0 if none."""
    return max((int(p.name) for p in (run_dir / "checkpoints").glob("*") if p.name.isdigit()), default=0)


def run_ladder(dataset: str, data: dict, extent, scale: Scale, args: Args, out: Path) -> dict:
    """``--qrl-ladder``: QRL trained through each budget in turn (one run, continued), its selected rows evaluated at
    each; ``{budget: {row: record}}``."""
    rows = [m for m in args.methods if ROWS[m].trains == "qrl"]
    ladder = {}
    for i, budget in enumerate(args.qrl_ladder):
        rung = dataclasses.replace(args, qrl_updates=budget, qrl_ladder=(), overwrite=args.overwrite and i == 0)
        stack = None
        paths = {m: out / "evals" / f"{run_name(dataset, m, args.goals)}@updates={budget}.json" for m in rows}
        records = {m: evaluated(paths[m], ROWS[m], budget, scale, args) for m in rows}
        for method in rows:
            path, record = paths[method], records[method]
            if record is None:
                done = trained_updates(out / "runs" / run_name(dataset, "qrl", args.goals))
                if stack is None and done > budget and not args.overwrite:  # (--overwrite clears it first)
                    if any(r is not None for r in records.values()):  # a row added after the run passed this rung
                        print(f"  ladder {budget:,} updates, {method}: not evaluated (added after the run passed "
                              f"this budget; it is at {done:,})", flush=True)
                        continue
                    raise ValueError(f"--qrl-ladder: {dataset}'s QRL has no record at {budget:,} updates and its run is "
                                     f"already at {done:,}, and a run cannot go back: ladder from {done:,} up, or pass "
                                     "--overwrite to train the ladder afresh")
                stack = stack or train_one(dataset, "qrl", data, scale, rung, out)
                record = report.write_record(path, evaluate_row(dataset, method, *stack, data, extent, scale, rung))
            ladder.setdefault(budget, {})[method] = record
            print(f"  ladder {budget:,} updates, {method}: {record['mean']:.1f} ± {record['std']:.1f}", flush=True)
    return ladder


LADDER_SIGNALS = ("critic0/lagrange_multiplier", "critic0/violation", "critic0/mean_goal_distance")


def format_ladder(ladders: dict) -> str:
    """Per dataset and budget: each QRL row's success and the critic's signals at that budget."""
    lines = ["QRL budget ladder: success (%) per row, and the first critic's signals (seed mean) at each budget"]
    for dataset, ladder in ladders.items():
        for budget, rows in ladder.items():
            signals = next(iter(rows.values())).get("signals", {})
            cells = "  ".join(f"{m} {r['mean']:.1f} ± {r['std']:.1f}" for m, r in rows.items())
            read = "  ".join(f"{k.split('/')[-1]} {signals[k]:.3g}" for k in LADDER_SIGNALS if k in signals)
            lines.append(f"{dataset:<30} {budget:>8,}  {cells}  |  {read}")
    return "\n".join(lines)


def run(args: Args) -> dict:
    start = time.time()
    scale = scales()[args.scale]
    out = Path(args.out_dir or f"results/ogbench/{args.scale}")
    (out / "evals").mkdir(parents=True, exist_ok=True)
    results, datasets, references, ladders = {}, {}, {}, {}
    episodes = args.episodes_per_task or scale.episodes_per_task
    for dataset in args.datasets:
        path = ogbench_maze.make_dataset(dataset, args.dataset_seed, scale.dataset_episodes, args.data_root)
        data = load_dataset(path)
        extent = ogbench_maze.maze_extent(dataset)
        datasets[dataset] = dict(source=str(path), transitions=len(data["actions"]),
                                 episodes=int(data["segment_end"].sum()),
                                 **ogbench_maze.generation_info(path, "generation_seconds"))
        print(f"{dataset}: {datasets[dataset]['transitions']:,} transitions in {datasets[dataset]['episodes']:,} "
              f"episodes ({path})", flush=True)
        data = normalised(data, *extent)
        references[dataset] = straight_line_reference(dataset, episodes, out)
        print(f"  straight line (no learning): {references[dataset]['success']:.1f}", flush=True)
        if args.qrl_ladder:
            ladders[dataset] = run_ladder(dataset, data, extent, scale, args, out)
        stacks = {}
        for method in args.methods:
            eval_path = out / "evals" / f"{run_name(dataset, method, args.goals)}.json"
            row = ROWS[method]
            # After a ladder QRL's run continues: it is not cleared again.
            table_args = dataclasses.replace(args, overwrite=args.overwrite and not (args.qrl_ladder and
                                                                                  row.trains == "qrl"))
            budget = updates_of(row.trains, scale, args)
            record = ladders.get(dataset, {}).get(budget, {}).get(method) if row.trains == "qrl" else None
            if record is not None:  # the ladder's last rung is the table's budget
                report.write_record(eval_path, record)

            def measure(row=row, method=method, table_args=table_args):
                if row.trains not in stacks:
                    stacks[row.trains] = train_one(dataset, row.trains, data, scale, table_args, out)
                return evaluate_row(dataset, method, *stacks[row.trains], data, extent, scale, table_args)

            record = record or report.cached_record(
                eval_path, measure, overwrite=args.overwrite,
                current=lambda r, row=row, budget=budget: is_current(r, row, budget, scale, args))
            results.setdefault(dataset, {})[method] = record
            print(f"  {method}: {record['mean']:.1f} ± {record['std']:.1f} ({record['updates']:,} updates, "
                  f"{record['train_seconds']:.0f} s training, {record['eval_seconds']:.0f} s evaluation)", flush=True)
    table = format_table(results, args, scale, references)
    if ladders:
        table += "\n\n" + format_ladder(ladders)
    record = dict(scale=args.scale, scale_settings=dataclasses.asdict(scale), datasets=datasets, results=results,
                  straight_line=references, paper=PAPER, **(dict(ladder=ladders) if ladders else {}))
    return report.save_run(out, "platonic_rl.benchmarks.ogbench", args, record, table,
                           total_seconds=time.time() - start)


def main(argv=None):
    import tyro

    return run(tyro.cli(Args, args=argv))


if __name__ == "__main__":
    main()
