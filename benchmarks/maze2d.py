"""Offline goal reaching on D4RL maze2d: QRL (+BC), Contrastive RL (+BC), GCBC and MPPI with the QRL value
(Table 4.2, section 4.5.1, appendix C.3.2), and as a reference MPPI in the true dynamics with the true sparse
reward (no training; it plans in the pure-JAX point maze of ``envs.point_maze``). The rows are :data:`TABLE`'s,
each one entry (the trained seeds it acts with and how it acts), of three kinds:

* the paper's rows: ``qrl`` (QRL's actor), ``crl``, ``gcbc``, ``mppi`` (MPPI in QRL's learned model, the scale's
  samples), ``mppi_true``;
* this suite's deployable QRL policies (:mod:`platonic_rl.agents.qrl_policies`, built from what QRL learned and
  the dataset's states, never the simulator): ``qrl_lookahead`` (each grid action held k steps in the learned
  latent dynamics; ``qrl_lookahead_actor``: the actor's samples held instead of a grid), ``qrl_waypoints`` and
  ``qrl_waypoints_lookahead`` (the dataset state within reach H nearest the goal, then the actor or the lookahead
  towards it), ``mppi_paper_samples`` (MPPI at C.3.2's 10,000 samples); their settings are the scale's
  ``policies``;
* checks of the learned distance: ``qrl_grid`` (the argmin of the learned one-step cost over a 9x9 action grid:
  what a perfect one-step actor would do), ``qrl_true`` (the grid action whose *true* next state, the pure-JAX
  point maze's step, has the smallest learned distance to the goal: a failure there is the distance's own) and
  ``qrl_true_hold`` (the same with each action held ``critic_hold_steps``, 20, before the distance is read). These
  use the simulator: they test the distance, they do not compete.

    python -m platonic_rl.benchmarks.maze2d --scale quick                       # ~2 minutes: umaze, seed 0, a smoke run
    python -m platonic_rl.benchmarks.maze2d --scale cpu --layouts medium        # one layout, 3 seeds

For each layout: a D4RL-procedure dataset (``envs.maze2d.make_dataset``: Minari, cached by (layout, size,
seed)), then for each method its seeds trained as one ``jit(vmap(update))`` (:class:`SeedStack`) by the
offline loop, in a resumable run directory ``<out>/runs/<layout>-<method>``; then single-goal (D4RL's goal)
and multi-goal (random free cells) evaluation, ``episodes`` episodes per (layout, method, seed, setting),
D4RL-normalised. Each finished (layout, method) is stored in ``<out>/evals/`` and skipped when the command is
rerun, so a long run continues where it stopped. Goal sampling (C.3.2): QRL's goals are random dataset
states (C.3's p_goal) and its BC goals future states Delta t ~ Geometric(0.01) ahead of the same episode;
Contrastive RL and GCBC train on future-state goals (their own goal distribution). Inputs are normalised by
the layout's extent (``Layout.obs_center/obs_scale``) for every method.

Saves ``results.json`` (command, settings, per-seed scores, dataset sizes and times, the paper's numbers, and
per seed the rank correlation of QRL's learned distance with the true shortest path for two goals, and
whether QRL's actor picks the action its own critic rates best: :func:`actor_check`; per row its seconds per
action, one state at a time: :func:`seconds_per_action`),
``values.png`` (the learned distance d(s, g) over the maze for two goals per layout beside the true
shortest-path distance in cells) and ``trajectories.png`` (QRL's single-goal episodes); prints the table.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents.contract import host_policy
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent
from platonic_rl.agents.qrl_diagnostics import actor_critic_gap, grid_argmin_actions
from platonic_rl.agents.qrl_policies import MPPIPolicy, make_policy
from platonic_rl.agents.seeds import SeedStack
from platonic_rl.benchmarks import report, timing
from platonic_rl.benchmarks.qrl_slice import true_dynamics_greedy_actions
from platonic_rl.benchmarks.presets import Maze2dScale, QRLPolicySettings, fill_unset, maze2d_scales
from platonic_rl.common.planning import mppi_step
from platonic_rl.envs import maze2d, maze_geometry
from platonic_rl.envs.maze2d import normalised_data, normaliser
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.training import signals
from platonic_rl.training.offline import train_seeds

METHODS = ("qrl", "qrl_lookahead", "qrl_lookahead_dwell", "qrl_lookahead_actor", "qrl_waypoints",
           "qrl_waypoints_lookahead", "qrl_graph_waypoints", "qrl_graph_waypoints_lookahead",
           "qrl_graph_waypoints_arrival", "qrl_graph_waypoints_dwell", "qrl_graph_waypoints_goal",
           "qrl_graph_waypoints_rest", "qrl_graph_waypoints_gcbc", "qrl_graph_waypoints_gcbc_goal",
           "qrl_graph_waypoints_gcbc_rest", "qrl_graph_waypoints_direct", "qrl_graph_waypoints_gcbc_direct", "qrl_grid",
           "qrl_true", "qrl_true_hold", "crl", "gcbc", "mppi", "mppi_paper_samples", "mppi_true")  # TABLE's rows
MethodName = Literal[METHODS]
LAYOUTS = ("large", "medium", "umaze")
GOAL_DIMS = PointMaze.goal_dims  # a maze2d goal is a position (at rest): the waypoints' targets as goals

# Table 4.2 (mean over 5 seeds), normalised scores: {method: {setting: {layout: score}}}.
PAPER = {
    "qrl": {"single": dict(large=191.52, medium=163.59, umaze=71.72), "multi": dict(large=187.71, medium=150.51, umaze=150.60)},
    "crl": {"single": dict(large=81.65, medium=10.11, umaze=95.11), "multi": dict(large=172.64, medium=137.01, umaze=142.43)},
    "mppi": {"single": dict(large=19.32, medium=58.06, umaze=74.85), "multi": dict(large=37.73, medium=56.79, umaze=87.49)},
    "mppi_true": {"single": dict(large=5.1, medium=10.2, umaze=33.2), "multi": dict(large=8.0, medium=15.4, umaze=41.2)},
    "handcoded_controller": {"single": dict(large=128.13, medium=127.64, umaze=113.91),
                             "multi": dict(large=146.94, medium=119.97, umaze=128.53)},
}


@dataclasses.dataclass(frozen=True)
class Args:
    """Table 4.2 on maze2d at a chosen scale (see the module docstring)."""
    scale: Literal["quick", "cpu", "paper"] = "quick"
    layouts: tuple[Literal["large", "medium", "umaze"], ...] | None = None
    """Default: the three (quick: umaze alone, so that the smoke run takes about two minutes)."""
    methods: tuple[MethodName, ...] = METHODS
    """mppi plans with the trained QRL agents (it needs qrl's run); mppi_true plans in the true dynamics (the
    JAX point maze) with the true sparse reward, as a reference (no training)."""
    seeds: tuple[int, ...] | None = None
    """Default: 0 1 2 (quick: 0)."""
    dataset_seed: int = 0
    dataset_size: int | None = None
    """Transitions per generated dataset (default: the scale's; cpu/paper: D4RL's sizes)."""
    qrl_adaptive_entropy: bool = False
    """Add QRL's adaptive entropy term to its actor loss (C.3.2's offline runs and the presets: off)."""
    qrl_bc_weight: float | None = None
    """QRL's behaviour-cloning weight (default: the scale's, C.3.2's 0.05)."""
    qrl_actor_distance_scale: Literal["none", "batch_mean"] | None = None
    """QRL's actor distance term: "none" (the paper's, the presets') or "batch_mean", divided by its batch mean as in
    OGBench's QRL, so the BC weight is relative to a unit-sized distance term (default: the scale's)."""
    qrl_hidden: tuple[int, ...] | None = None
    """QRL's hidden layers, for its encoder, latent dynamics and actor MLPs (default: the scale's)."""
    qrl_updates: int | None = None
    """QRL's gradient updates (default: the scale's). A QRL run directory with the same settings and a smaller
    budget continues to this one (copy it into a new --out-dir to keep both)."""
    dataset: str | None = None
    """Train on this dataset instead of generating one: a Minari dataset directory or local id (e.g. a copy of
    D4RL/pointmaze/medium-v2) or a D4RL maze2d .hdf5 file; needs exactly one --layouts."""
    data_root: str | None = None
    """Where generated datasets are cached (default $PLATONIC_RL_DATA/maze2d or ~/.cache/platonic_rl/maze2d)."""
    episodes: int | None = None
    """Evaluation episodes per (layout, method, seed, setting) (default: the scale's)."""
    hold_steps: int | None = None
    """The latent lookahead's k, steps each candidate action is held (default: the scale's ``policies``)."""
    reach: float | None = None
    """The waypoints' H: waypoints w with d(s, w) <= H are within reach (default: the scale's)."""
    num_waypoints: int | None = None
    """Dataset states the waypoints are drawn from (default: the scale's)."""
    mppi_paper_samples: int | None = None
    """Samples of the ``mppi_paper_samples`` row (default: the scale's, C.3.2's 10,000 at cpu and paper)."""
    ladder: tuple[str, ...] = ()
    """Policy settings to evaluate beside the scale's, each ``NAME=VALUE`` with NAME a field of the scale's
    ``policies`` (e.g. ``hold_steps=5 hold_steps=40 reach=40``): every selected row whose settings hold NAME is
    evaluated once more with that value, into ``evals/<layout>-<row>@NAME=VALUE.json``, and the ladder table is
    printed below the main one. One call loads the dataset and the trained agents once for the whole ladder."""
    out_dir: str | None = None
    """Default: results/maze2d/<scale>."""
    runs_dir: str | None = None
    """Where the trained runs are kept, one directory per (layout, method) (default: <out-dir>/runs): another
    --out-dir can evaluate other policy settings with the same trained agents."""
    overwrite: bool = False
    """Start every selected (layout, method) afresh instead of resuming/reusing it."""

    def __post_init__(self):
        if self.dataset is not None and (self.layouts is None or len(self.layouts) != 1):
            raise ValueError(f"--dataset needs exactly one --layouts (the dataset's maze), got {self.layouts}")
        fill_unset(self, self.scale == "quick", layouts=(LAYOUTS, ("umaze",)), seeds=((0, 1, 2), (0,)))
        for name in ("hold_steps", "num_waypoints", "mppi_paper_samples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.reach is not None and not self.reach > 0:
            raise ValueError(f"--reach must be > 0 (steps of learned distance), got {self.reach}")
        for rung in self.ladder:
            ladder_rung(rung)  # refuses what it cannot read
        if self.qrl_updates is not None and self.qrl_updates < 1:
            raise ValueError(f"--qrl-updates must be >= 1, got {self.qrl_updates}")
        if self.qrl_hidden is not None and (not self.qrl_hidden or min(self.qrl_hidden) < 1):
            raise ValueError(f"--qrl-hidden must be one or more positive widths, got {self.qrl_hidden}")
        if self.qrl_bc_weight is not None and not self.qrl_bc_weight >= 0:
            raise ValueError(f"--qrl-bc-weight must be >= 0, got {self.qrl_bc_weight}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds must be distinct, got {self.seeds}")


def train_method(method: str, scale: Maze2dScale, data: dict, seeds, run_dir: Path, overwrite: bool
                 ) -> tuple[SeedStack, list[dict]]:
    """The method's seeds trained as one stack (or its finished run read back): ``(stack, the logged rows)``."""
    agent_class, config, train, sampling = scale.method(method)
    return train_seeds(agent_class, config, seeds, data, dataclasses.replace(train, overwrite=overwrite), sampling,
                       run_dir, desc=f"{run_dir.name} x{len(seeds)} seeds")


_GOAL_DISTANCES = jax.jit(QRLContinuousAgent.goal_distances)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _mppi_actions(plan_costs: jax.tree_util.Partial, key, plans, observations, goals, num_samples: int):
    """One MPPI step for every episode of a batch; ``plan_costs(observation, goal, sequences [K, H, A]) -> [K]``."""
    keys = jax.random.split(key, observations.shape[0])

    def one(k, plan, obs, goal):  # C.3.2: horizon 5, noise variance 1, lambda 0.01
        return mppi_step(k, plan, lambda seqs: plan_costs(obs, goal, seqs), num_samples, 1.0, 0.01)

    return jax.vmap(one)(keys, plans, observations, goals)


def true_dynamics_plan_costs(env: PointMaze, observation: jax.Array, goal: jax.Array, action_sequences: jax.Array
                             ) -> jax.Array:
    """Cost of each action sequence ``[K, H, A]`` rolled out from ``observation`` (D4RL's ``[x, y, vx, vy]``,
    the whole state) in the true dynamics: minus the number of steps that end within reach of ``goal`` (the
    sparse reward). ``[K]``."""
    def rollout(actions):
        def step(physics, action):
            physics = env.dynamics(physics, action)
            return physics, env.reached(env.observe(physics), goal)

        physics = dict(position=observation[:2], velocity=observation[2:])
        return -jnp.sum(jax.lax.scan(step, physics, actions)[1].astype(jnp.float32))

    return jax.vmap(rollout)(action_sequences)


@functools.cache
def _true_dynamics_costs(layout_name: str) -> jax.tree_util.Partial:
    """:func:`true_dynamics_plan_costs` in one layout's point maze (one object per layout: one compilation)."""
    return jax.tree_util.Partial(functools.partial(true_dynamics_plan_costs, PointMaze(layout_name)))


def true_dynamics_mppi_policy(layout: maze2d.Layout, num_samples: int, seed: int, horizon: int = 5):
    """MPPI with the true dynamics and reward (Table 4.2's reference row): plans in the pure-JAX point maze
    (:class:`~platonic_rl.envs.point_maze.PointMaze`, equal to MuJoCo's step to ~2e-5 away from walls and
    ~1e-3 at wall contacts) while the episodes run in MuJoCo; each episode's plan is carried between steps."""
    state, costs = dict(plans=None, key=jax.random.PRNGKey(seed)), _true_dynamics_costs(layout.name)

    def policy(obs, goals):
        if state["plans"] is None:
            state["plans"] = jnp.zeros((obs.shape[0], horizon, 2))
        state["key"], key = jax.random.split(state["key"])
        actions, state["plans"] = _mppi_actions(costs, key, state["plans"], jnp.asarray(obs, jnp.float32),
                                                jnp.asarray(goals, jnp.float32), num_samples)
        return np.asarray(actions)

    return policy


# ------------------------------------------------------------------------------------ the methods, as a table


@dataclasses.dataclass(frozen=True)
class Method:
    """One row of the table: the trained stack it acts with and how it acts.

    ``policy(agent, layout, scale, seed, data) -> host policy (observations [N, 4], goals [N, 4]) -> actions``,
    with ``data`` the normalised dataset (the waypoints' states). ``settings(scale)`` go into the row's record;
    a record made with other settings is evaluated again. ``kind``: "paper" (Table 4.2's rows), "addition" (this
    suite's deployable policies, built from what QRL learned) or "check" (uses the simulator: a test of the
    learned distance, not a competitor)."""
    label: str
    trains: str | None  # "qrl", "crl", "gcbc": whose trained seeds it acts with; None: nothing trained
    policy: Callable[..., Callable]
    kind: Literal["paper", "addition", "check"] = "paper"
    episodes: Callable[[Maze2dScale], int] = lambda scale: scale.episodes
    settings: Callable[[Maze2dScale], dict] = lambda scale: {}
    helper: str | None = None  # another trained method whose seeds serve in the policy: policy(agent, helper, ...)


def _agent_policy(agent, layout, scale, seed, data):
    return host_policy(agent, normaliser(layout))


def _qrl_policy(name: str, inner: str | None = None, arrival: str | None = None, **options):
    """A row acting with :func:`~platonic_rl.agents.qrl_policies.make_policy`'s policy ``name`` at the scale's
    settings (:meth:`~platonic_rl.benchmarks.presets.QRLPolicySettings.policy_kwargs`, with ``options``);
    ``inner="helper"``: the row's helper agent (e.g. GCBC's seed) acts between the waypoints."""
    def build(agent, *rest):
        helper, (layout, scale, seed, data) = (rest[0], rest[1:]) if inner == "helper" else (None, rest)
        kwargs = scale.policies.policy_kwargs(name, inner, arrival, **options)
        if inner == "helper":
            kwargs["inner"] = helper
        return host_policy(make_policy(name, agent, data["observations"], **kwargs), normaliser(layout))

    return build


def _recorded(name: str, inner: str | None = None, arrival: str | None = None,
              **options) -> Callable[[Maze2dScale], dict]:
    """The settings a policy row keeps in its record: its policy's, less the inner policy's name."""
    return lambda scale: {k: list(v) if isinstance(v, tuple) else v for k, v in scale.policies.policy_kwargs(
        name, inner, arrival, **options).items() if k != "inner"}


def _policy_row(label: str, name: str, inner: str | None = None, arrival: str | None = None, **options) -> Method:
    """A row of this suite's deployable QRL policies (kind "addition"): policy ``name`` acting with QRL's trained
    seeds, its settings kept in its record; ``inner="helper"``: GCBC's seeds act between the waypoints."""
    return Method(label, "qrl", _qrl_policy(name, inner, arrival, **options), "addition",
                  settings=_recorded(name, inner, arrival, **options), helper="gcbc" if inner == "helper" else None)


def _true_greedy_policy(hold: Callable[[Maze2dScale], int]):
    def build(agent, layout, scale, seed, data):
        return true_dynamics_greedy_policy(agent, layout, hold(scale))

    return build


def _mppi_policy(samples: Callable[[Maze2dScale], int]):
    """MPPI in QRL's learned model (C.3.2's horizon 5, noise 1, lambda 0.01) with ``samples(scale)`` samples."""
    def build(agent, layout, scale, seed, data):
        return host_policy(MPPIPolicy(agent, num_samples=samples(scale), seed=1000 + seed), normaliser(layout))

    return build


TABLE: dict[str, Method] = {
    "qrl": Method("QRL (+BC)", "qrl", _agent_policy),
    "qrl_lookahead": _policy_row("QRL, latent lookahead", "lookahead"),
    "qrl_lookahead_dwell": _policy_row("QRL, latent lookahead, mean along the hold", "lookahead", score="dwell"),
    "qrl_lookahead_actor": _policy_row("QRL, latent lookahead over the actor's samples", "lookahead",
                                       candidates="actor"),
    "qrl_waypoints": _policy_row("QRL, waypoints + actor", "waypoints", "actor"),
    "qrl_waypoints_lookahead": _policy_row("QRL, waypoints + lookahead", "waypoints", "lookahead"),
    "qrl_graph_waypoints": _policy_row("QRL, graph waypoints + actor", "graph_waypoints", "actor"),
    "qrl_graph_waypoints_lookahead": _policy_row("QRL, graph waypoints + lookahead", "graph_waypoints", "lookahead"),
    "qrl_graph_waypoints_arrival": _policy_row("QRL, graph waypoints + actor, lookahead at the goal",
                                               "graph_waypoints", "actor", "lookahead"),
    "qrl_graph_waypoints_dwell": _policy_row("QRL, graph waypoints + actor, dwell lookahead at the goal",
                                             "graph_waypoints", "actor", "dwell"),
    "qrl_graph_waypoints_goal": _policy_row("QRL, graph waypoints + lookahead, targets as goals", "graph_waypoints",
                                            "lookahead", goal_dims=GOAL_DIMS),
    "qrl_graph_waypoints_rest": _policy_row("QRL, graph waypoints + actor, targets at rest after a stall",
                                            "graph_waypoints", "actor", stall_goal_dims=GOAL_DIMS),
    "qrl_graph_waypoints_gcbc": _policy_row("QRL's graph waypoints + GCBC between them", "graph_waypoints", "helper"),
    "qrl_graph_waypoints_gcbc_goal": _policy_row("QRL's graph waypoints + GCBC between them, targets as goals",
                                                 "graph_waypoints", "helper", goal_dims=GOAL_DIMS),
    "qrl_graph_waypoints_gcbc_rest": _policy_row(
        "QRL's graph waypoints + GCBC between them, targets at rest after a stall", "graph_waypoints", "helper",
        stall_goal_dims=GOAL_DIMS),
    "qrl_graph_waypoints_direct": _policy_row(
        "QRL, the lookahead towards the goal until a stall, then graph waypoints + actor", "graph_waypoints", "actor",
        "lookahead", direct_first=True),
    "qrl_graph_waypoints_gcbc_direct": _policy_row(
        "GCBC towards the goal until a stall, then QRL's graph waypoints at rest + GCBC", "graph_waypoints", "helper",
        stall_goal_dims=GOAL_DIMS, direct_first=True),
    "qrl_grid": Method("QRL critic, grid argmin", "qrl", lambda agent, layout, *_: grid_policy(agent, layout), "check"),
    "qrl_true": Method("QRL critic, true dynamics", "qrl", _true_greedy_policy(lambda s: 1), "check"),
    "qrl_true_hold": Method("QRL critic, true dyn., held", "qrl", _true_greedy_policy(lambda s: s.critic_hold_steps),
                            "check", settings=lambda s: dict(hold_steps=s.critic_hold_steps)),
    "crl": Method("Contrastive RL (+BC)", "crl", _agent_policy),
    "gcbc": Method("GCBC", "gcbc", _agent_policy),
    "mppi": Method("MPPI with QRL value", "qrl", _mppi_policy(lambda s: s.mppi_samples),
                   episodes=lambda s: s.mppi_episodes),
    "mppi_paper_samples": Method("MPPI, C.3.2's samples", "qrl", _mppi_policy(lambda s: s.policies.mppi_samples),
                                 "addition",
                                 episodes=lambda s: s.policies.mppi_episodes,
                                 settings=lambda s: dict(mppi_samples=s.policies.mppi_samples)),
    "mppi_true": Method("MPPI, true dynamics", None,
                        lambda agent, layout, scale, seed, data: true_dynamics_mppi_policy(
                            layout, scale.mppi_samples, seed=1000 + seed),
                        episodes=lambda s: s.mppi_episodes),
}
assert tuple(TABLE) == METHODS


def ladder_rung(rung: str) -> tuple[str, int | float | bool]:
    """``"NAME=VALUE"`` -> (NAME, VALUE) for a field of :class:`~platonic_rl.benchmarks.presets.QRLPolicySettings`,
    the value of the field's type (a bool as ``true`` or ``false``)."""
    name, sep, value = rung.partition("=")
    fields = {f.name: f.type for f in dataclasses.fields(QRLPolicySettings)}
    if not sep or name not in fields:
        raise ValueError(f"--ladder entries must be NAME=VALUE with NAME one of {sorted(fields)}, got {rung!r}")
    if fields[name] in ("bool", bool):
        if value.lower() not in ("true", "false"):
            raise ValueError(f"--ladder {rung!r}: {name} takes true or false, got {value!r}")
        return name, value.lower() == "true"
    try:
        number = int(value) if fields[name] in ("int", int) else float(value)
    except ValueError:
        raise ValueError(f"--ladder {rung!r}: {name} takes a {fields[name]}, got {value!r}") from None
    if not number > 0:
        raise ValueError(f"--ladder {rung!r}: {name} must be > 0")
    return name, number


def seconds_per_action(policy: Callable, layout: maze2d.Layout, repeats: int = 20) -> float:
    """Mean seconds of one call of a fresh host policy on one observation over ``repeats`` calls, after two warm-up
    calls (which compile): what acting costs a deployed agent, one state at a time, with the work a policy does only
    every few steps (the waypoints' choice) spread over the calls."""
    rng = np.random.default_rng(0)
    obs = maze2d.goal_states(layout.obs_center[None, :2] + rng.uniform(-0.5, 0.5, (1, 2)))
    goals = maze2d.goal_states(np.asarray(layout.goal, np.float64))[None]
    for _ in range(2):
        policy(obs, goals)
    start = time.perf_counter()
    for _ in range(repeats):
        policy(obs, goals)
    return (time.perf_counter() - start) / repeats


def _acting(stack: SeedStack | None, helper: SeedStack | None, i: int) -> tuple:
    """Seed ``i``'s trained agent (None: nothing trained) and, for a row with a ``helper``, its agent too."""
    agent = stack.agent(i) if stack is not None else None
    return (agent,) if helper is None else (agent, helper.agent(i))


def evaluate_method(method: str, stack: SeedStack | None, layout: maze2d.Layout, args: Args, scale: Maze2dScale,
                    data: dict | None = None, helper: SeedStack | None = None) -> dict:
    """Every seed's single- and multi-goal episodes for one row of :data:`TABLE` (the fraction of episodes at the
    goal at their end beside each score), and its seconds per action. ``helper``: the stack of the row's
    ``helper`` method, whose seed i serves with seed i of ``stack``."""
    row = TABLE[method]
    out = dict(row.settings(scale))
    for setting in ("single", "multi"):
        per_seed, at_end, trajectories = [], [], None
        episodes = args.episodes or row.episodes(scale)
        for i, seed in enumerate(args.seeds):
            policy = row.policy(*_acting(stack, helper, i), layout, scale, seed, data)
            result = maze2d.evaluate(policy, layout, setting, episodes, seed=10_000 * (setting == "multi") + seed,
                                     keep_trajectories=6 if i == 0 else 0)
            per_seed.append(result["score"])
            at_end.append(result["at_goal_at_end"])
            if i == 0:
                trajectories = dict(positions=result["trajectories"], goals=result["goals"][:6])
        out[setting] = dict(scores=per_seed, mean=float(np.mean(per_seed)), std=float(np.std(per_seed)),
                            at_goal_at_end=at_end, at_goal_at_end_mean=float(np.mean(at_end)), episodes=episodes,
                            trajectories=trajectories)
    out["seconds_per_action"] = seconds_per_action(row.policy(*_acting(stack, helper, 0), layout, scale,
                                                              args.seeds[0], data), layout)
    out["matmul_peak_flops"] = timing.matmul_peak()  # the machine's float32 matmul rate, beside the time above
    return out


def record_is_current(record: dict, method: str, scale: Maze2dScale) -> bool:
    """Whether a row's stored record was made with the settings the scale now gives it (a policy setting the record
    lacks was made at that setting's default: the record is older than the setting)."""
    defaults = {f.name: f.default for f in dataclasses.fields(QRLPolicySettings)}
    return all(record.get(key, defaults.get(key)) == value for key, value in TABLE[method].settings(scale).items())


def value_maps(agent: QRLContinuousAgent, layout: maze2d.Layout, goals: list[tuple[int, int]], per_cell: int = 8):
    """The learned distance d(s, g) (mean over critics) on a grid of resting positions, the true shortest-path
    distance in cells, and their rank correlation (:func:`maze_geometry.shortest_path_rank_correlation`), for each
    goal cell."""
    grid, walls = maze_geometry.resting_grid(layout, per_cell)
    states = maze2d.goal_states(grid.reshape(-1, 2))
    norm = normaliser(layout)
    maps = []
    for goal in goals:
        g = maze2d.goal_states(np.asarray(goal, np.float64))[None].repeat(len(states), 0)
        learned = np.asarray(_GOAL_DISTANCES(agent, norm(states), norm(g))).mean(0).reshape(walls.shape)
        maps.append(dict(goal=list(goal), learned=np.where(walls, np.nan, learned),
                         true_cells=np.where(layout.walls, np.nan, maze2d.cell_distances(layout, goal)),
                         rank_correlation=maze_geometry.shortest_path_rank_correlation(learned, layout, goal,
                                                                                       per_cell)))
    return maps


def grid_policy(agent: QRLContinuousAgent, layout: maze2d.Layout):
    """A host policy acting by :func:`~platonic_rl.agents.qrl_diagnostics.grid_argmin_actions` (the ``qrl_grid``
    row): it separates a failing actor from a critic whose greedy policy fails."""
    norm = normaliser(layout)
    return lambda obs, goals: np.asarray(grid_argmin_actions(agent, norm(obs), norm(goals)))


@functools.partial(jax.jit, static_argnames=("env", "hold_steps"))
def _true_greedy(agent, env, observations, goals, hold_steps):
    return true_dynamics_greedy_actions(agent, env, observations, goals, hold_steps=hold_steps)


def true_dynamics_greedy_policy(agent: QRLContinuousAgent, layout: maze2d.Layout, hold_steps: int = 1):
    """A host policy acting by :func:`~platonic_rl.benchmarks.qrl_slice.true_dynamics_greedy_actions` (the
    ``qrl_true`` row; ``qrl_true_hold`` with ``hold_steps`` > 1) while the episodes run in MuJoCo."""
    env = PointMaze(layout.name)
    return lambda obs, goals: np.asarray(_true_greedy(agent, env, jnp.asarray(obs, jnp.float32),
                                                      jnp.asarray(goals, jnp.float32), hold_steps))


def actor_check(agent: QRLContinuousAgent, data: dict, layout: maze2d.Layout, states: int = 1000, seed: int = 0
                ) -> dict:
    """:func:`~platonic_rl.agents.qrl_diagnostics.actor_critic_gap` on ``states`` random dataset states, paired
    with D4RL's single goal and with random dataset states as goals: the mean gap (steps of learned distance) and
    the fraction of states whose gap exceeds one step."""
    rng = np.random.default_rng(seed)
    observations = data["observations"][rng.integers(len(data["observations"]), size=states)]
    single = np.asarray(normaliser(layout)(maze2d.goal_states(layout.goal)[None]))
    goal_sets = {"single goal": np.repeat(single, states, 0).astype(np.float32),
                 "random goals": data["observations"][rng.integers(len(data["observations"]), size=states)]}
    out = {}
    for name, goals in goal_sets.items():
        gap = np.asarray(actor_critic_gap(agent, jnp.asarray(observations), jnp.asarray(goals)))
        out[name] = dict(mean_gap=float(gap.mean()), above_one_step=float((gap > 1.0).mean()))
    return out


def format_table(summary: dict, scale_name: str, note: str, seeds) -> str:
    lines = [f"maze2d (D4RL-normalised score, mean +- std over seeds {list(seeds)}; paper: Table 4.2, 5 seeds) -- "
             f"scale {scale_name!r}: {note}"]
    header = f"{'method':<30}" + "".join(f"{s + ' ' + l:>24}" for s in ("single", "multi") for l in LAYOUTS) + \
             f"{'average':>18}{'ms/action':>11}"
    lines += [header, "-" * len(header)]
    for method in METHODS:
        if method not in summary:
            continue
        cells, values = [], []
        for setting in ("single", "multi"):
            for layout in LAYOUTS:
                r = summary[method].get(layout, {}).get(setting)
                paper = PAPER.get(method, {}).get(setting, {}).get(layout)
                ours = f"{r['mean']:.1f}+-{r['std']:.1f}" if r else "n/a"
                values += [r["mean"]] if r else []
                cells.append(f"{ours} ({paper if paper is not None else '-'})")
        average = f"{np.mean(values):.1f}" if values else "n/a"
        timed = [summary[method][l]["seconds_per_action"] for l in LAYOUTS
                 if "seconds_per_action" in summary[method].get(l, {})]
        per_action = f"{1e3 * np.mean(timed):.1f}" if timed else "n/a"
        lines.append(f"{TABLE[method].label:<30}" + "".join(f"{c:>24}" for c in cells) + f"{average:>18}"
                     + f"{per_action:>11}")
    lines.append("each cell: ours (paper). References (paper): handcoded controller single "
                 + ", ".join(f"{l} {PAPER['handcoded_controller']['single'][l]}" for l in LAYOUTS)
                 + " (the paper's MPPI with true dynamics: Janner et al. 2022's numbers)")
    return "\n".join(lines)


def format_ladder(ladder: dict) -> str:
    """The ladder's records: per layout, each row at each setting, single / multi (mean +- std over seeds)."""
    lines = ["ladder of policy settings (D4RL-normalised score, mean +- std over seeds; episodes per seed and setting)"]
    for layout_name in LAYOUTS:
        for rung, r in sorted(ladder.get(layout_name, {}).items(), key=lambda item: _rung_order(item[0])):
            lines.append(f"  {layout_name:<7} {rung:<42} single {r['single']['mean']:7.1f} +- {r['single']['std']:5.1f}"
                         f"   multi {r['multi']['mean']:7.1f} +- {r['multi']['std']:5.1f}   ({r['single']['episodes']} "
                         f"episodes, {1e3 * r['seconds_per_action']:.1f} ms per action)")
    return "\n".join(lines)


def _rung_order(rung: str) -> tuple:
    row, _, setting = rung.partition("@")
    name, _, value = setting.partition("=")
    return row, name, float(value == "True") if value in ("False", "True") else float(value)


def plot_values(path: Path, maps: dict, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = [l for l in LAYOUTS if l in maps]
    ncols = 2 * max(len(maps[l]) for l in layouts)
    fig, axes = plt.subplots(len(layouts), ncols, figsize=(3.4 * ncols, 3.0 * len(layouts)), squeeze=False)
    for r, layout in enumerate(layouts):
        for c, m in enumerate(maps[layout]):
            L = maze2d.get_layout(layout)
            for k, (name, img, unit) in enumerate((("learned d(s, g)", np.asarray(m["learned"], float), "steps"),
                                                   ("shortest path", np.asarray(m["true_cells"], float), "cells"))):
                ax = axes[r, 2 * c + k]
                rows, cols = L.shape
                extent = (-0.5 - maze2d.CELL_OFFSET, cols - 0.5 - maze2d.CELL_OFFSET,
                          rows - 0.5 - maze2d.CELL_OFFSET, -0.5 - maze2d.CELL_OFFSET)
                im = ax.imshow(img, extent=extent, cmap="viridis")
                ax.plot(m["goal"][1], m["goal"][0], "r*", ms=12)
                rho = f"\nrank correlation {m['rank_correlation']:.2f}" if k == 0 and "rank_correlation" in m else ""
                ax.set_title(f"{layout}: {name}, goal {tuple(m['goal'])}{rho}", fontsize=8)  # (wide mazes: two lines)
                ax.set_xlabel("y (D4RL coordinates)")
                ax.set_ylabel("x (D4RL coordinates)")
                fig.colorbar(im, ax=ax, fraction=0.046, label=unit)
    report.suptitle(fig, title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_trajectories(path: Path, trajectories: dict, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = [l for l in LAYOUTS if l in trajectories]
    fig, axes = plt.subplots(1, len(layouts), figsize=(4.2 * len(layouts), 4.0), squeeze=False)
    for ax, layout in zip(axes[0], layouts):
        L = maze2d.get_layout(layout)
        rows, cols = L.shape
        ax.imshow(L.walls, cmap="Greys", extent=(-0.5 - maze2d.CELL_OFFSET, cols - 0.5 - maze2d.CELL_OFFSET,
                                                 rows - 0.5 - maze2d.CELL_OFFSET, -0.5 - maze2d.CELL_OFFSET))
        t = trajectories[layout]
        for k, xy in enumerate(np.asarray(t["positions"])):
            line, = ax.plot(xy[:, 1], xy[:, 0], lw=1.2)
            ax.plot(xy[0, 1], xy[0, 0], "o", color=line.get_color(), ms=5)
        goal = np.asarray(t["goals"])[0]
        ax.plot(goal[1], goal[0], "r*", ms=14, label="goal")
        ax.set_title(f"{layout}: QRL, single goal (o = start)", fontsize=9)
        ax.set_xlabel("y (D4RL coordinates)")
        ax.set_ylabel("x (D4RL coordinates)")
        ax.legend(loc="lower left", fontsize=7)
    report.suptitle(fig, title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


CRITIC_RECORD = "qrl_critic"
"""``<out>/evals/<layout>-qrl_critic.json``: what QRL's trained stack says beyond its scores, kept so that a later
call (another layout, another method) rebuilds the record and the pictures without the run's checkpoints."""
DATASET_RECORD = "dataset"
"""``<out>/evals/<layout>-dataset.json``: the dataset the layout's runs trained on (source, generation settings,
transitions, episodes), so that a call for another layout keeps it in ``results.json``."""


def critic_record(stack: SeedStack, history: list[dict], data: dict, layout: maze2d.Layout, seeds) -> dict:
    """QRL's training signals over the last 20% of its updates (:func:`~platonic_rl.training.signals.convergence`),
    its learned distance over the maze for two goals (seed 0's maps, every seed's rank correlation with the true
    shortest path) and its actor's gap to its own critic (:func:`actor_check`, per seed)."""
    far = maze2d.cell_distances(layout, layout.goal_cell)  # the free cell farthest from D4RL's goal
    goals = [layout.goal_cell, tuple(int(c) for c in np.unravel_index(np.nanargmax(np.where(
        np.isfinite(far), far, np.nan)), far.shape))]
    per_seed = [value_maps(stack.agent(i), layout, goals) for i in range(len(seeds))]
    return dict(seeds=list(seeds), updates=history[-1]["step"] if history else None,
                signals=signals.convergence(history), value_maps=per_seed[0],
                value_rank={str(tuple(m["goal"])): [seed_maps[j]["rank_correlation"] for seed_maps in per_seed]
                            for j, m in enumerate(per_seed[0])},
                actor_gap=[actor_check(stack.agent(i), data, layout) for i in range(len(seeds))])


def scale_for(args: Args) -> Maze2dScale:
    """The scale ``args`` names, with its overrides (dataset size, QRL's settings and updates) applied."""
    scale = maze2d_scales()[args.scale]
    if args.dataset_size is not None:
        scale = dataclasses.replace(scale, dataset_size=args.dataset_size)
    qrl = {}  # QRL's config fields the arguments override
    if args.qrl_adaptive_entropy:
        qrl["adaptive_entropy"] = True
    if args.qrl_bc_weight is not None:
        qrl["bc_weight"] = args.qrl_bc_weight
    if args.qrl_hidden is not None:
        qrl.update(encoder_hidden=tuple(args.qrl_hidden), dynamics_hidden=tuple(args.qrl_hidden),
                   actor_hidden=tuple(args.qrl_hidden))
    if args.qrl_actor_distance_scale is not None:
        qrl["actor_distance_scale"] = args.qrl_actor_distance_scale
    scale = dataclasses.replace(scale, qrl=dataclasses.replace(scale.qrl, **qrl))
    if args.qrl_updates is not None:
        scale = dataclasses.replace(scale, qrl_train=dataclasses.replace(scale.qrl_train, steps=args.qrl_updates))
    policies = dict(hold_steps=args.hold_steps, reach=args.reach, num_waypoints=args.num_waypoints,
                    mppi_samples=args.mppi_paper_samples)
    return dataclasses.replace(scale, policies=dataclasses.replace(
        scale.policies, **{k: v for k, v in policies.items() if v is not None}))


def run(args: Args) -> dict:
    start_time = time.time()
    scale = scale_for(args)
    out = Path(args.out_dir or f"results/maze2d/{args.scale}")
    runs = Path(args.runs_dir) if args.runs_dir is not None else out / "runs"
    (out / "evals").mkdir(parents=True, exist_ok=True)
    datasets, maps, trajectories, value_rank, actor_gap = {}, {}, {}, {}, {}
    for layout_name in args.layouts:
        layout = maze2d.get_layout(layout_name)
        if args.dataset is not None:
            path, info = Path(args.dataset), dict(source=args.dataset)
        else:
            path = maze2d.make_dataset(layout, scale.dataset_size, args.dataset_seed, args.data_root)
            info = dict(source=str(path), **maze2d.dataset_info(path))
        data = maze2d.load_dataset(path, layout)
        info.update(transitions=len(data["actions"]), episodes=int(data["segment_end"].sum()))
        report.write_record(out / "evals" / f"{layout_name}-{DATASET_RECORD}.json", info, indent=None)
        print(f"maze2d-{layout_name}: {info['transitions']:,} transitions in {info['episodes']:,} episodes ({path})")
        data = normalised_data(data, layout)
        stacks, histories = {}, {}
        critic_path = out / "evals" / f"{layout_name}-{CRITIC_RECORD}.json"
        def trained_for(method: str, overwrite: bool = False) -> tuple[SeedStack | None, dict]:
            """The stack a row acts with and, for a row with a helper, ``dict(helper=its stack)`` (each trained
            here, or its finished run read back, once per layout)."""
            row = TABLE[method]
            for needed in (row.trains, row.helper):
                if needed is not None and needed not in stacks:
                    stacks[needed], histories[needed] = train_method(
                        needed, scale, data, args.seeds, runs / f"{layout_name}-{needed}",
                        overwrite=overwrite and method == needed)
            return stacks.get(row.trains), ({} if row.helper is None else dict(helper=stacks[row.helper]))

        for method in [m for m in METHODS if m in args.methods]:
            eval_path = out / "evals" / f"{layout_name}-{method}.json"
            saved = None if args.overwrite else report.read_record(eval_path)
            # A record made with other settings (e.g. another hold length) is not this scale's.
            done = saved is not None and record_is_current(saved, method, scale)
            if done and (method != "qrl" or critic_path.is_file()):  # (QRL's stack also feeds its critic record)
                continue
            stack, helper = trained_for(method, overwrite=args.overwrite)
            if done:
                continue
            t = time.time()
            result = evaluate_method(method, stack, layout, args, scale, data, **helper)
            result["eval_seconds"] = time.time() - t
            report.write_record(eval_path, result, indent=None)
            print(f"  {method}: single {result['single']['mean']:.1f}, multi {result['multi']['mean']:.1f} "
                  f"({result['eval_seconds']:.0f} s to evaluate, {1e3 * result['seconds_per_action']:.1f} ms per "
                  f"action)")
        for rung in args.ladder:
            name, value = ladder_rung(rung)
            rung_scale = dataclasses.replace(scale, policies=dataclasses.replace(scale.policies, **{name: value}))
            for method in [m for m in METHODS if m in args.methods and name in TABLE[m].settings(scale)]:
                def measure(method=method, rung_scale=rung_scale, name=name, value=value):
                    stack, helper = trained_for(method)
                    result = evaluate_method(method, stack, layout, args, rung_scale, data, **helper)
                    print(f"  {method} @ {name}={value}: single {result['single']['mean']:.1f}, multi "
                          f"{result['multi']['mean']:.1f} ({1e3 * result['seconds_per_action']:.1f} ms per action)")
                    return result

                report.cached_record(out / "evals" / f"{layout_name}-{method}@{name}={value}.json", measure,
                                     current=lambda r, method=method, rung_scale=rung_scale: record_is_current(
                                         r, method, rung_scale), overwrite=args.overwrite, indent=None)
        if "qrl" in stacks:
            critic = critic_record(stacks["qrl"], histories["qrl"], data, layout, args.seeds)
            report.write_record(critic_path, critic, indent=None)
            print(f"  QRL's training signals: {signals.describe(critic['signals'])}")
            for setting in ("single goal", "random goals"):
                gaps = [g[setting]["mean_gap"] for g in critic["actor_gap"]]
                print(f"  QRL's actor vs its critic, {setting}: its action is {np.mean(gaps):.2f} steps of learned "
                      f"distance worse than the best of a 9x9 action grid (mean over states and seeds)")
    # Every layout's dataset and QRL critic records in --out-dir, including those of earlier calls (a layout at a time).
    qrl_signals = {}
    for layout_name in LAYOUTS:
        path = out / "evals" / f"{layout_name}-{DATASET_RECORD}.json"
        if path.is_file():
            datasets[layout_name] = json.loads(path.read_text())
        path = out / "evals" / f"{layout_name}-{CRITIC_RECORD}.json"
        if path.is_file():
            critic = json.loads(path.read_text())
            maps[layout_name], value_rank[layout_name] = critic["value_maps"], critic["value_rank"]
            actor_gap[layout_name], qrl_signals[layout_name] = critic["actor_gap"], critic["signals"]
    summary = {}
    for method in METHODS:
        for layout_name in LAYOUTS:
            path = out / "evals" / f"{layout_name}-{method}.json"
            if path.is_file():
                summary.setdefault(method, {})[layout_name] = json.loads(path.read_text())
    for layout_name in LAYOUTS:
        r = summary.get("qrl", {}).get(layout_name)
        if r:
            trajectories[layout_name] = r["single"]["trajectories"]
    ladder = {}  # {layout: {"<row>@NAME=VALUE": record}}, every ladder record in --out-dir
    for path in sorted((out / "evals").glob("*@*.json")):
        layout_name, _, rung = path.stem.partition("-")
        record = json.loads(path.read_text())
        ladder.setdefault(layout_name, {})[rung] = {k: v for k, v in record.items() if k not in ("single", "multi")} | {
            s: {k: v for k, v in record[s].items() if k != "trajectories"} for s in ("single", "multi")}
    table = format_table(summary, args.scale, scale.note, args.seeds)
    if ladder:
        table += "\n" + format_ladder(ladder)
    table += "".join(f"\nQRL's training signals, {l}: {signals.describe(qrl_signals[l])}" for l in LAYOUTS
                     if l in qrl_signals)
    budget = (f"scale {args.scale}: QRL {scale.qrl_train.steps:,} updates of batch {scale.qrl_train.batch_size}, "
              f"{len(args.seeds)} seeds")
    record = dict(scale=args.scale, scale_note=scale.note, settings=dataclasses.asdict(scale), datasets=datasets,
                  summary={m: {l: {**{k: v for k, v in r.items() if k not in ("single", "multi")},
                                   **{s: {k: v for k, v in r[s].items() if k != "trajectories"}
                                      for s in ("single", "multi")}} for l, r in per.items()}
                           for m, per in summary.items()},
                  ladder=ladder, value_rank_correlation=value_rank, actor_critic_gap=actor_gap, qrl_signals=qrl_signals,
                  paper=PAPER)
    plots = {}
    if maps:
        plots["values.png"] = lambda p: plot_values(p, maps, f"maze2d, QRL seed {args.seeds[0]}: learned distance vs "
                                                              f"shortest path ({budget})")
    if trajectories:
        plots["trajectories.png"] = lambda p: plot_trajectories(p, trajectories, f"maze2d ({budget})")
    return report.save_run(out, "platonic_rl.benchmarks.maze2d", args, record, table, plots=plots,
                           total_seconds=time.time() - start_time)


def main():
    import tyro

    return run(tyro.cli(Args))


if __name__ == "__main__":
    main()
