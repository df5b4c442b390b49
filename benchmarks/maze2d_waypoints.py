"""Why QRL's graph waypoints act well where the state is a position (OGBench's point mazes) and not where it also
holds a velocity (maze2d): the graph over the waypoints, the targets chosen along episodes, how an inner policy
tracks a waypoint, and what keeps the point at the goal. Reads the ``maze2d`` benchmark's trained QRL (and GCBC)
seeds; acts in the pure-JAX point maze (``envs.point_maze``, equal to MuJoCo's step to ~1e-3), so every episode
of every seed runs in one compiled program.

    python -m platonic_rl.benchmarks.maze2d --scale cpu --layouts medium --methods qrl gcbc   # train first
    python -m platonic_rl.benchmarks.maze2d_waypoints --layout medium --runs-dir results/maze2d/cpu/runs

Four measurements per seed (the graph waypoints at the benchmark's settings, ``QRLPolicySettings``):

* **the graph**: its edges (learned distance <= H between waypoints), out-degree, strongly connected components,
  the edges whose two positions do not see each other in the maze (a wall between them: a shortcut the learned
  distance takes) and how far apart in the maze an edge's ends are, against what the dataset covers in H steps;
  the rank correlation of every waypoint's path cost to the single goal with its shortest path in the maze;
* **episodes** (D4RL's single goal, random starts): the score, whether the point arrived and whether it is within
  the goal's radius at the end, the steps its target lay behind a wall, for each policy of :func:`policies`;
* **tracking**: from dataset states, the target the policy chooses held fixed for 2H steps: how near the point comes
  to the target's position, and its speed there against the target's, with the target as the dataset holds it
  (position and velocity) and as a goal is given (its position at rest, ``goal_dims``);
* **staying**: started at the goal at rest, the steps within the goal's radius over ``stay_steps`` and the distance
  at the end; and the learned distance from the goal's position moving at a given speed to the goal at rest.

Saves ``<out>/results.json`` and ``<out>/waypoints.png`` (seed 0: the graph's wall-crossing edges, and an episode
with its targets).

With ``--targets-at X Y [X Y ...]`` it measures only the choice the graph waypoints make from those positions at rest
(e.g. where recorded episodes stall): the learned distance to the goal, the target (a waypoint or the goal), its
position and velocity, and whether a wall lies between the position and the target (:func:`targets_report`):

    python -m platonic_rl.benchmarks.maze2d_waypoints --layout large --targets-at 5.45 7.93 6.31 7.76 \
        --runs-dir results/maze2d/cpu/runs --out-dir results/maze2d_waypoints_large_stalls
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.csgraph
import scipy.stats

from platonic_rl.agents import qrl_policies as P
from platonic_rl.benchmarks import report, timing
from platonic_rl.benchmarks.presets import maze2d_scales
from platonic_rl.envs import maze2d, maze_geometry
from platonic_rl.envs.jax_env import Normalized
from platonic_rl.envs.point_maze import TIMESTEP, PointMaze
from platonic_rl.training.offline import train_seeds

GOAL_DIMS = PointMaze.goal_dims  # a maze2d goal specifies a position (at rest)
WALL_MARGIN = 0.05  # walls grown by this for the maze's shortest paths: the dataset's ball (radius 0.1) presses into
#                     MuJoCo's soft contacts, a little nearer than its radius
STAY_HOLDS = (1, 3, 5, 10, 20)  # the lookahead's holds tried from the goal at rest
STAY_CANDIDATES = {"grid 9": dict(grid_size=9), "grid 17": dict(grid_size=17),
                   "actor 64": dict(grid_size=0, actor_samples=64)}


@dataclasses.dataclass(frozen=True)
class Args:
    """The graph waypoints on one maze2d layout, measured (see the module docstring)."""
    layout: Literal["umaze", "medium", "large"] = "medium"
    scale: Literal["quick", "cpu", "paper"] = "cpu"
    seeds: tuple[int, ...] = (0, 1, 2)
    runs_dir: str = "results/maze2d/cpu/runs"
    """The maze2d benchmark's run directories (``<layout>-qrl``, ``<layout>-gcbc``), trained and finished."""
    out_dir: str = "results/maze2d_waypoints"
    episodes: int = 30
    """Single-goal episodes per seed and policy."""
    tracked_states: int = 200
    """Dataset states the tracking test starts from, per seed."""
    stay_steps: int = 300
    dataset_seed: int = 0
    targets_at: tuple[float, ...] = ()
    """x y pairs (D4RL coordinates): measure only the targets chosen from these positions at rest (the module
    docstring)."""

    def __post_init__(self):
        if len(self.targets_at) % 2:
            raise ValueError(f"--targets-at takes x y pairs, got {len(self.targets_at)} numbers")


def policies(agent, states, settings: P.QRLPolicySettings, gcbc=None) -> dict:
    """The policies measured, by name: the graph waypoints with each inner policy, with targets as the dataset
    holds them and as a goal is given (``/goal``), and the lookahead alone as the reference."""
    graph = lambda inner, **kw: P.make_policy(  # noqa: E731
        "graph_waypoints", agent, states, **(settings.policy_kwargs("graph_waypoints", inner if isinstance(inner, str)
                                                                    else None) | dict(inner=inner) | kw))
    actor_lookahead = dict(grid_size=0, actor_samples=settings.actor_samples, hold_steps=settings.hold_steps)
    out = {"graph + actor": graph("actor"), "graph + actor /goal": graph("actor", goal_dims=GOAL_DIMS),
           "graph + lookahead": graph("lookahead"), "graph + lookahead /goal": graph("lookahead", goal_dims=GOAL_DIMS),
           "graph + actor's lookahead /goal": graph("lookahead", goal_dims=GOAL_DIMS, **actor_lookahead),
           "graph + both lookahead /goal": graph("lookahead", goal_dims=GOAL_DIMS, **(actor_lookahead | dict(
               grid_size=9))),
           "lookahead": P.make_policy("lookahead", agent, **settings.policy_kwargs("lookahead")),
           "actor's lookahead": P.make_policy("lookahead", agent, **settings.policy_kwargs("lookahead",
                                                                                          candidates="actor"))}
    if gcbc is not None:
        out |= {"graph + GCBC": graph(gcbc), "graph + GCBC /goal": graph(gcbc, goal_dims=GOAL_DIMS), "GCBC": gcbc}
    return out


# ------------------------------------------------------------------------------------ the graph


def graph_report(policy: P.WaypointPolicy, layout: maze2d.Layout, data: dict, goal: np.ndarray) -> dict:
    """The waypoint graph's shape, its edges against the maze, and its path costs to ``goal`` (normalised goal
    state ``[4]``) against the shortest paths."""
    unnorm = lambda x: np.asarray(x)[..., :2] * layout.obs_scale[:2] + layout.obs_center[:2]  # noqa: E731
    agent, reach = policy.agent, float(policy.reach)
    proj = policy.waypoint_projections
    d = np.asarray(P.waypoint_distances(agent, proj))
    m = d.shape[0]
    edges = (d <= reach) & ~np.eye(m, dtype=bool)
    positions = unnorm(policy.waypoints)
    geodesic = maze_geometry.geodesic_distances(layout, positions, radius=WALL_MARGIN)
    euclid = np.linalg.norm(positions[:, None] - positions[None], axis=-1)
    blocked = geodesic > euclid + 1e-3                         # a wall between the two positions
    paths = np.asarray(policy.paths)
    components = scipy.sparse.csgraph.connected_components(edges, directed=True, connection="strong")[1]
    sizes = np.bincount(components)
    # How far the dataset's point travels in H steps (within a segment), in the maze
    obs = unnorm(data["observations"])
    ends = np.flatnonzero(data["segment_end"])
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(obs) - int(reach), 5000)
    same = np.searchsorted(ends, starts) == np.searchsorted(ends, starts + int(reach) - 1)
    travelled = np.linalg.norm(obs[starts[same] + int(reach)] - obs[starts[same]], axis=-1)
    costs = np.asarray(policy.goal_costs(policy.waypoint_goal_distances(jnp.asarray(goal)[None])))[0]
    to_goal = maze_geometry.geodesic_distances(layout, positions, unnorm(goal)[None], radius=WALL_MARGIN)[:, 0]
    finite = np.isfinite(costs)
    return dict(
        waypoints=m, reach=reach, edges=int(edges.sum()), out_degree_mean=float(edges.sum(1).mean()),
        out_degree_min=int(edges.sum(1).min()), reachable_pairs=float(np.isfinite(paths).mean()),
        strong_components=int(len(sizes)), largest_component=int(sizes.max()),
        edges_through_walls=float(blocked[edges].mean()),
        edge_length_quantiles=np.quantile(geodesic[edges], [0.5, 0.9, 0.99]).tolist(),
        dataset_travel_in_reach_quantiles=np.quantile(travelled, [0.5, 0.9, 0.99]).tolist(),
        edges_longer_than_dataset_travel_q99=float((geodesic[edges] > np.quantile(travelled, 0.99)).mean()),
        goal_path_rank_correlation=float(scipy.stats.spearmanr(costs[finite], to_goal[finite])[0]),
        goal_direct_rank_correlation=float(scipy.stats.spearmanr(
            np.asarray(policy.waypoint_goal_distances(jnp.asarray(goal)[None]))[0], to_goal)[0]),
        waypoints_with_a_path_to_goal=float(finite.mean()),
        _positions=positions, _edges=edges, _blocked=blocked)


# ------------------------------------------------------------------------------------ episodes


def episodes(policy, env: Normalized, starts, goals: jax.Array, steps: int) -> dict[str, jax.Array]:
    """Episodes from ``starts`` (the env's physics, batched) towards ``goals [N, 4]`` (normalised): the positions
    ``[N, T + 1, 2]`` (maze coordinates) and, for waypoint policies, the targets ``[N, T, 4]`` (normalised)."""
    observe = jax.vmap(lambda p: env.normalize(env.env.observe(p)))
    dynamics = jax.vmap(env.env.dynamics)

    def body(carry, _):
        physics, state = carry
        obs = observe(physics)
        actions, state = policy.step(state, obs, goals)
        target = state["targets"] if isinstance(state, dict) and "targets" in state else goals
        return (dynamics(physics, jnp.clip(actions, -1, 1)), state), (physics["position"], target)

    (last, _), (positions, targets) = jax.lax.scan(body, (starts, policy.initial_policy_state(goals.shape[0])), None,
                                                   length=steps)
    positions = jnp.concatenate([jnp.swapaxes(positions, 0, 1), last["position"][:, None]], 1)
    return dict(positions=positions, targets=jnp.swapaxes(targets, 0, 1), velocity=last["velocity"])


_episodes = jax.jit(episodes, static_argnums=(1, 4))


def blocked(layout: maze2d.Layout, positions: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``[N]`` bool: whether the maze's shortest path from each position to its target (D4RL coordinates ``[N, 2]``)
    is longer than the straight line, i.e. a wall lies between them."""
    geo = np.diag(maze_geometry.geodesic_distances(layout, positions, targets, radius=WALL_MARGIN))
    return geo > np.linalg.norm(positions - targets, axis=-1) + 1e-3


def episode_report(out: dict, layout: maze2d.Layout, goal: np.ndarray) -> dict:
    """For :func:`episodes`' ``out`` towards ``goal`` (normalised): score, arrival and the end within the goal's radius; where a waypoint policy's targets lay behind walls."""
    positions = np.asarray(out["positions"])
    dist = np.linalg.norm(positions[:, 1:] - (goal[:2] * layout.obs_scale[:2] + layout.obs_center[:2]), axis=-1)
    within = dist <= maze2d.GOAL_RADIUS
    arrived = within.any(1)
    first = np.where(arrived, within.argmax(1), -1)
    target_xy = np.asarray(out["targets"])[..., :2] * layout.obs_scale[:2] + layout.obs_center[:2]
    sample = (slice(None), slice(0, positions.shape[1] - 1, 10))  # every 10th step: the geodesics are costly
    p, t = positions[:, :-1][sample].reshape(-1, 2), target_xy[sample].reshape(-1, 2)
    try:
        behind = float(np.mean(blocked(layout, p, t))) if len(p) <= 4000 else None
    except ValueError:  # a point pressed into a wall's margin
        behind = None
    return dict(score=float(maze2d.normalized_score(layout, within.sum(1)).mean()), arrived=float(arrived.mean()),
                at_goal_at_end=float(within[:, -1].mean()),
                steps_to_arrive_median=float(np.median(first[arrived])) if arrived.any() else None,
                stayed_after_arrival=float(np.mean([w[f:].mean() for w, f in zip(within, first) if f >= 0]))
                if arrived.any() else None,
                final_distance_median=float(np.median(dist[:, -1])), targets_behind_walls=behind)


def targets_report(policy: P.WaypointPolicy, layout: maze2d.Layout, positions: np.ndarray, goal: np.ndarray
                   ) -> list[dict]:
    """From each of ``positions [N, 2]`` (D4RL coordinates) at rest, the target ``policy`` chooses for ``goal``
    (normalised ``[4]``): the learned distances d(s, g), d(s, target) and the target's cost to the goal (its path
    cost with ``plan="graph"``; 0 for the goal itself), whether it is a waypoint, its position and velocity (D4RL
    coordinates), and whether the straight line to it is blocked (its maze distance longer than the line)."""
    norm = maze2d.normaliser(layout)
    states = jnp.asarray(norm(maze2d.goal_states(np.asarray(positions, np.float64))), jnp.float32)
    targets, info = policy.targets(states, jnp.broadcast_to(jnp.asarray(goal, jnp.float32), states.shape))
    physical = np.asarray(targets) * layout.obs_scale + layout.obs_center
    behind = blocked(layout, np.asarray(positions), physical[:, :2])
    return [dict(position=[float(v) for v in positions[n]], goal_distance=float(info["goal_distance"][n]),
                 waypoint=bool(info["use_waypoint"][n]), target_position=[float(v) for v in physical[n, :2]],
                 target_velocity=[float(v) for v in physical[n, 2:]], target_distance=float(info["target_distance"][n]),
                 target_goal_cost=float(info["target_goal_distance"][n]), behind_wall=bool(behind[n]))
            for n in range(len(positions))]


# ------------------------------------------------------------------------------------ tracking and staying


def tracking_report(policy: P.WaypointPolicy, inner, env: Normalized, states: np.ndarray, goal: jax.Array,
                    hold: int, layout: maze2d.Layout) -> dict:
    """From dataset ``states`` (normalised), the target ``policy`` chooses for ``goal``, held fixed ``hold`` steps
    with ``inner`` acting towards it: as the dataset holds it and as a goal (its position at rest). The nearest the
    point comes to the target's position, and the speeds there (maze units per second)."""
    goals = jnp.broadcast_to(goal, states.shape)
    targets, info = policy.targets(jnp.asarray(states), goals)
    use = np.asarray(info["use_waypoint"])
    unnorm = lambda x: np.asarray(x) * layout.obs_scale + layout.obs_center  # noqa: E731
    physical = jnp.asarray(unnorm(states), jnp.float32)
    starts = dict(position=physical[:, :2], velocity=physical[:, 2:])
    out = {}
    for name, target in (("as held", targets), ("as a goal", policy.replace(goal_dims=GOAL_DIMS).as_goal(
            targets, goals))):
        target = jnp.where(jnp.asarray(use)[:, None], target, goals)
        ran = _episodes(inner, env, starts, target, hold)
        pos = np.asarray(ran["positions"])[use]
        t = unnorm(target)[use]
        gap = np.linalg.norm(pos - t[:, None, :2], axis=-1)
        closest = gap.argmin(1)
        speed = np.linalg.norm(np.gradient(pos, axis=1), axis=-1) / TIMESTEP  # maze units per second
        out[name] = dict(states=int(use.sum()), nearest_median=float(np.median(gap.min(1))),
                         within_quarter=float(np.mean(gap.min(1) <= 0.25)),
                         speed_at_nearest_median=float(np.median(speed[np.arange(len(pos)), closest])),
                         target_speed_median=float(np.median(np.linalg.norm(t[:, 2:], axis=-1))))
    return out


def staying_report(policy, env: Normalized, layout: maze2d.Layout, goal: np.ndarray, steps: int, n: int = 32) -> dict:
    """Started at the goal's position at rest (jittered by up to 0.1): the fraction of steps within the goal's
    radius over ``steps`` steps and the final distances."""
    rng = np.random.default_rng(1)
    position = layout.goal + rng.uniform(-0.1, 0.1, (n, 2))
    starts = dict(position=jnp.asarray(position, jnp.float32), velocity=jnp.zeros((n, 2)))
    goals = jnp.broadcast_to(jnp.asarray(goal, jnp.float32), (n, 4))
    pos = np.asarray(_episodes(policy, env, starts, goals, steps)["positions"])[:, 1:]
    dist = np.linalg.norm(pos - layout.goal, axis=-1)
    return dict(within=float((dist <= maze2d.GOAL_RADIUS).mean()), final_distance_median=float(np.median(dist[:, -1])),
                final_distance_max=float(dist[:, -1].max()))


def distance_at_goal_by_speed(agent, layout: maze2d.Layout, goal: np.ndarray, speeds=(0.0, 0.25, 0.5, 1.0, 2.0)
                              ) -> dict:
    """max over the critics of d((goal position, velocity), goal at rest), mean over 16 directions, per speed."""
    angles = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    out = {}
    for speed in speeds:
        states = np.concatenate([np.repeat(layout.goal[None], 16, 0), speed * np.stack([np.cos(angles),
                                                                                        np.sin(angles)], 1)], 1)
        norm = maze2d.normaliser(layout)(states)
        out[str(speed)] = float(np.asarray(agent.goal_distances(norm, jnp.broadcast_to(goal, norm.shape))).max(0)
                                .mean())
    return out


# ------------------------------------------------------------------------------------ the run


def run(args: Args) -> dict:
    start = time.time()
    scale = maze2d_scales()[args.scale]
    settings = scale.policies
    layout = maze2d.get_layout(args.layout)
    runs = Path(args.runs_dir)
    for method in ("qrl", "gcbc"):
        if not (runs / f"{args.layout}-{method}").is_dir():
            raise FileNotFoundError(f"{runs / f'{args.layout}-{method}'} is not there: train it first with python -m "
                                    f"platonic_rl.benchmarks.maze2d --scale {args.scale} --layouts {args.layout} "
                                    f"--methods qrl gcbc --runs-dir {runs}")
    path = maze2d.make_dataset(layout, scale.dataset_size, args.dataset_seed)
    data = maze2d.normalised_data(maze2d.load_dataset(path, layout), layout)
    stacks = {}
    for method in ("qrl", "gcbc"):  # the finished runs, read back
        agent_class, config, train, sampling = scale.method(method)
        stacks[method] = train_seeds(agent_class, config, args.seeds, data, train, sampling,
                                     run_dir=runs / f"{args.layout}-{method}", desc=method)[0]
    env = Normalized(PointMaze(args.layout, goals="single"), tuple(layout.obs_center), tuple(layout.obs_scale))
    goal = np.asarray(maze2d.normaliser(layout)(maze2d.goal_states(layout.goal)), np.float32)
    if args.targets_at:
        return run_targets_at(args, stacks["qrl"], data, layout, goal, start)
    rng = np.random.default_rng(0)
    per_seed, figure = [], None
    for i, seed in enumerate(args.seeds):
        agent, gcbc = stacks["qrl"].agent(i), stacks["gcbc"].agent(i)
        built = policies(agent, data["observations"], settings, gcbc)
        graph = graph_report(built["graph + actor"], layout, data, goal)
        keys = jax.random.split(jax.random.PRNGKey(100 + seed), args.episodes)
        starts = jax.vmap(lambda k: env.env.init(k)[0])(keys)
        goals = jnp.broadcast_to(jnp.asarray(goal), (args.episodes, 4))
        ran = {name: _episodes(p, env, starts, goals, layout.episode_length)
               for name, p in built.items()}
        states = data["observations"][rng.integers(len(data["observations"]), size=args.tracked_states)]
        inners = {"actor": agent, "lookahead": P.make_policy("lookahead", agent, **settings.policy_kwargs("lookahead")),
                  "GCBC": gcbc}
        record = dict(
            seed=seed, graph={k: v for k, v in graph.items() if not k.startswith("_")},
            episodes={name: episode_report(r, layout, goal) for name, r in ran.items()},
            tracking={name: tracking_report(built["graph + actor"], inner, env, states, jnp.asarray(goal),
                                            2 * int(settings.reach), layout) for name, inner in inners.items()},
            staying={name: staying_report(p, env, layout, goal, args.stay_steps) for name, p in built.items()},
            staying_lookahead={f"k={k} {kind}": staying_report(P.make_policy("lookahead", agent, hold_steps=k, **cand),
                                                               env, layout, goal, args.stay_steps)
                               for k in STAY_HOLDS for kind, cand in STAY_CANDIDATES.items()},
            distance_at_goal_by_speed=distance_at_goal_by_speed(agent, layout, goal))
        per_seed.append(record)
        print(f"seed {seed}: " + "; ".join(f"{n} {e['score']:.1f} (end {e['at_goal_at_end']:.2f})"
                                           for n, e in record["episodes"].items()))
        if i == 0:
            figure = dict(graph=graph, ran={k: np.asarray(ran[k]["positions"][0]) for k in ran},
                          targets=np.asarray(ran["graph + lookahead"]["targets"][0]))
    summary = {section: {name: {key: float(np.mean([s[section][name][key] for s in per_seed
                                                     if s[section][name][key] is not None]))
                                for key, value in per_seed[0][section][name].items() if not isinstance(value, dict)}
                         for name in per_seed[0][section]} for section in ("episodes", "staying", "staying_lookahead")}
    record = dict(layout=args.layout, scale=args.scale, settings=dataclasses.asdict(settings), seeds=list(args.seeds),
                  per_seed=per_seed, summary=summary, matmul_peak_flops=timing.matmul_peak())
    table = format_table(summary, per_seed, args)
    out = Path(args.out_dir)
    return report.save_run(out, "platonic_rl.benchmarks.maze2d_waypoints", args, record, table,
                           plots={"waypoints.png": lambda p: plot(p, figure, layout, args)},
                           total_seconds=time.time() - start)


def run_targets_at(args: Args, stack, data: dict, layout: maze2d.Layout, goal: np.ndarray, start: float) -> dict:
    """``--targets-at``: :func:`targets_report` per seed, for the graph waypoints at the benchmark's settings."""
    settings = maze2d_scales()[args.scale].policies
    positions = np.asarray(args.targets_at, np.float64).reshape(-1, 2)
    per_seed = []
    for i, seed in enumerate(args.seeds):
        policy = P.make_policy("graph_waypoints", stack.agent(i), data["observations"],
                               **settings.policy_kwargs("graph_waypoints", "actor"))
        per_seed.append(dict(seed=seed, targets=targets_report(policy, layout, positions, goal)))
    lines = [f"maze2d {args.layout}, {args.scale} critics: the graph waypoints' target from each position at rest "
             f"(single goal {tuple(layout.goal)}, reach H = {settings.reach:g})",
             f"{'seed':<6}{'position':<16}{'d(s, g)':>9}{'target':>16}{'velocity':>16}{'d(s, t)':>9}{'cost t->g':>11}"
             f"{'blocked':>9}"]
    for s in per_seed:
        for t in s["targets"]:
            fmt = lambda v: f"({v[0]:.2f}, {v[1]:.2f})"  # noqa: E731
            lines.append(f"{s['seed']:<6}{fmt(t['position']):<16}{t['goal_distance']:9.1f}"
                         f"{fmt(t['target_position']) if t['waypoint'] else 'the goal':>16}"
                         f"{fmt(t['target_velocity']):>16}{t['target_distance']:9.1f}{t['target_goal_cost']:11.1f}"
                         f"{'yes' if t['behind_wall'] else 'no':>9}")
    record = dict(layout=args.layout, scale=args.scale, settings=dataclasses.asdict(settings), seeds=list(args.seeds),
                  per_seed=per_seed, matmul_peak_flops=timing.matmul_peak())
    return report.save_run(Path(args.out_dir), "platonic_rl.benchmarks.maze2d_waypoints", args, record,
                           "\n".join(lines), total_seconds=time.time() - start)


def format_table(summary: dict, per_seed: list, args: Args) -> str:
    lines = [f"maze2d {args.layout}, {args.scale} critics, seeds {list(args.seeds)}, {args.episodes} single-goal "
             f"episodes per seed (JAX point maze)",
             f"{'policy':<34}{'score':>8}{'arrived':>9}{'at end':>8}{'stays':>7}{'behind walls':>14}{'stay test':>11}"]
    for name, e in summary["episodes"].items():
        behind = e.get("targets_behind_walls")
        lines.append(f"{name:<34}{e['score']:8.1f}{e['arrived']:9.2f}{e['at_goal_at_end']:8.2f}"
                     f"{e.get('stayed_after_arrival', float('nan')):7.2f}"
                     f"{'' if behind is None else f'{behind:.2f}':>14}{summary['staying'][name]['within']:11.2f}")
    for s in per_seed:
        g = s["graph"]
        lines.append(f"seed {s['seed']} graph: {g['edges']} edges, out-degree {g['out_degree_mean']:.1f} (min "
                     f"{g['out_degree_min']}), {g['strong_components']} strong components (largest "
                     f"{g['largest_component']}), through walls {g['edges_through_walls']:.3f}, path cost vs shortest "
                     f"path rank corr. {g['goal_path_rank_correlation']:.2f} (direct {g['goal_direct_rank_correlation']:.2f})")
        for inner, t in s["tracking"].items():
            lines.append(f"  tracking with {inner}: " + "; ".join(
                f"{k}: nearest {v['nearest_median']:.2f}, within 0.25 {v['within_quarter']:.2f}, speed there "
                f"{v['speed_at_nearest_median']:.2f} (target's {v['target_speed_median']:.2f})" for k, v in t.items()))
        lines.append(f"  learned distance at the goal by speed: {s['distance_at_goal_by_speed']}")
        lines.append("  from the goal at rest, the lookahead's steps within the radius: " + "; ".join(
            f"{k} {v['within']:.2f}" for k, v in s["staying_lookahead"].items()))
    return "\n".join(lines)


def plot(path: Path, figure: dict, layout: maze2d.Layout, args: Args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = layout.shape
    extent = (-0.5 - maze2d.CELL_OFFSET, cols - 0.5 - maze2d.CELL_OFFSET, rows - 0.5 - maze2d.CELL_OFFSET,
              -0.5 - maze2d.CELL_OFFSET)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    g = figure["graph"]
    pos, edges, blocked = g["_positions"], g["_edges"], g["_blocked"]
    ax = axes[0]
    ax.imshow(layout.walls, cmap="Greys", extent=extent)
    ax.plot(pos[:, 1], pos[:, 0], ".", ms=2, color="tab:blue", label="waypoints")
    a, b = np.nonzero(edges & blocked)
    for i, j in zip(a[:400], b[:400]):
        ax.plot([pos[i, 1], pos[j, 1]], [pos[i, 0], pos[j, 0]], "-", color="tab:red", lw=0.5, alpha=0.5)
    ax.set_title(f"graph: {g['edges']} edges within reach H = {g['reach']:.0f},\n"
                 f"{100 * g['edges_through_walls']:.1f}% through walls (red, up to 400 drawn)", fontsize=9)
    ax = axes[1]
    ax.imshow(layout.walls, cmap="Greys", extent=extent)
    for name in ("graph + lookahead", "graph + lookahead /goal", "lookahead"):
        xy = figure["ran"][name]
        ax.plot(xy[:, 1], xy[:, 0], lw=1.2, label=name)
    t = figure["targets"][..., :2] * layout.obs_scale[:2] + layout.obs_center[:2]
    ax.plot(t[::5, 1], t[::5, 0], "x", ms=3, color="tab:blue", alpha=0.6, label="its targets (every 5th step)")
    ax.plot(layout.goal[1], layout.goal[0], "r*", ms=14, label="goal")
    ax.set_title("seed 0, episode 0: single goal", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    for ax in axes:
        ax.set_xlabel("y (D4RL coordinates)")
        ax.set_ylabel("x (D4RL coordinates)")
    report.suptitle(fig, f"maze2d {args.layout}: QRL's graph waypoints ({args.scale} critics, "
                         f"{len(args.seeds)} seeds; {args.episodes} episodes per seed)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    import tyro

    return run(tyro.cli(Args))


if __name__ == "__main__":
    main()
