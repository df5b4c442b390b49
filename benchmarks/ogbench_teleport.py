"""What breaks on OGBench's teleport maze: where QRL's policies go, what the teleporters do to them, and what the
learned distance says a teleporter costs. Reads the ``ogbench`` benchmark's trained QRL seeds.

    python -m platonic_rl.benchmarks.ogbench --scale cpu --datasets pointmaze-teleport-navigate-v0 --methods qrl \
        --qrl-updates 40000 --out-dir results/ogbench_teleport                                     # train first
    python -m platonic_rl.benchmarks.ogbench_teleport --dataset pointmaze-teleport-navigate-v0 \
        --qrl-updates 40000 --runs-from results/ogbench_teleport --out-dir results/ogbench_teleport_why

The teleport maze (Park et al. 2024) has two inbound teleporters; entering one puts the point at one of three
outbound ones drawn at random, one of which lies in a cell walled in on every side: an episode sent there never leaves.
A quasimetric of optimal costs (QRL's) prices a stochastic transition at its best outcome, as if the agent could
choose where the teleporter sends it. Two measurements per seed:

* **the learned cost of a teleporter**: d(in, out_k) from each inbound teleporter's centre to each outbound one's
  (the true cost: one step to wherever it sends the point), and d(out_k, goal) from each outbound teleporter to each
  task's goal, against the maze's shortest path (cells, without teleporters);
* **episodes**, for the actor and the graph waypoints at the benchmark's settings: OGBench's five tasks, every
  episode's positions kept; per task the success, the share of episodes that passed through a teleporter, that
  ended in the walled-in cell, and the success of the episodes that never teleported.

Saves ``<out>/results.json`` (and prints the tables)."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import jax.numpy as jnp
import numpy as np

from platonic_rl.benchmarks import ogbench, report
from platonic_rl.envs import ogbench_maze
from platonic_rl.training.offline import load_dataset

ROWS = ("qrl", "qrl_graph_waypoints")


@dataclasses.dataclass(frozen=True)
class Args:
    dataset: Literal["pointmaze-teleport-navigate-v0", "pointmaze-teleport-stitch-v0"] = \
        "pointmaze-teleport-navigate-v0"
    trained_seeds: tuple[int, ...] = (0, 1, 2)
    """The seeds the run trained (``ogbench --seeds``)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """The trained seeds to evaluate."""
    qrl_updates: int = 40_000
    """The trained run's budget (its run directory must hold it: this reads the run, it does not train)."""
    episodes_per_task: int = 20
    runs_from: str = "results/ogbench_teleport"
    """The ``ogbench`` benchmark's ``--out-dir`` whose ``runs/`` hold the trained QRL seeds."""
    data_root: str | None = None
    out_dir: str = "results/ogbench_teleport_why"


def teleporters(env) -> dict:
    """The maze's teleporters from OGBench's env (its ``_teleport_info``): inbound and outbound centres (x, y), the
    trigger radius, and which outbound ones lie in a cell with no free neighbour (walled in)."""
    maze = env.unwrapped
    info = maze._teleport_info
    if info is None:
        raise ValueError(f"{maze.spec.id if maze.spec else type(maze).__name__} has no teleporters")
    free = np.asarray(maze.maze_map) == 0
    walled = [not any(free[i + di, j + dj] for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)))
              for i, j in info["teleport_out_ijs"]]
    return dict(inbound=np.asarray(info["teleport_in_xys"], np.float64),
                outbound=np.asarray(info["teleport_out_xys"], np.float64),
                outbound_cells=[list(ij) for ij in info["teleport_out_ijs"]], walled_in=walled,
                radius=1.5 * info["teleport_radius"])


def jumps(positions: np.ndarray, limit: float) -> np.ndarray:
    """``[episodes, steps]``: where a step moved the point farther than ``limit`` (a teleport)."""
    return np.linalg.norm(np.diff(positions, axis=1), axis=-1) > limit


def learned_costs(agent, normalise, ports: dict, goals: np.ndarray, starts: np.ndarray) -> dict:
    """max_i d_i (the policies' distance) between the teleporters' centres, from the exits to the tasks' goals, and
    from each task's start to its goal."""
    d = lambda a, b: np.asarray(jnp.max(agent.goal_distances(normalise(a), normalise(b)), 0))  # noqa: E731
    inbound, outbound = ports["inbound"], ports["outbound"]
    pairs_in = np.repeat(inbound, len(outbound), 0)
    pairs_out = np.tile(outbound, (len(inbound), 1))
    out_goal = d(np.repeat(outbound, len(goals), 0), np.tile(goals, (len(outbound), 1)))
    return dict(in_to_out=d(pairs_in, pairs_out).reshape(len(inbound), len(outbound)).tolist(),
                out_to_goal=out_goal.reshape(len(outbound), len(goals)).tolist(), start_to_goal=d(starts, goals).tolist())


def episode_report(result: dict, ports: dict, limit: float, cell_of) -> list[dict]:
    """Per task: success, the share of episodes that teleported, that ended in a walled-in cell, the success of the
    episodes that never teleported, and the cells (row, column) where the failed episodes ended, most frequent
    first (``cell_of``: position -> cell)."""
    rows = []
    walled = ports["outbound"][np.asarray(ports["walled_in"])]
    for task, (trajectory, steps) in enumerate(zip(result["trajectories"], result["steps"]), start=1):
        positions = trajectory["positions"]
        success = steps < ogbench_maze.EVAL_STEPS
        teleported = jumps(positions, limit).any(1)
        final = positions[:, -1]  # a finished episode's position stays as it ended
        trapped = (np.linalg.norm(final[:, None] - walled[None], axis=-1) < 2.0).any(1) if len(walled) else \
            np.zeros(len(final), bool)
        rows.append(dict(task=task, success=float(success.mean()), teleported=float(teleported.mean()),
                         trapped=float(trapped.mean()),
                         success_without_teleport=float(success[~teleported].mean()) if (~teleported).any() else None,
                         episodes_without_teleport=int((~teleported).sum()),
                         failed_ends=_counts([cell_of(p) for p in final[~success]])))
    return rows


def _counts(cells: list[tuple[int, int]]) -> list[list[int]]:
    """``[[row, column, episodes], ...]``, most frequent first."""
    unique, counts = np.unique(np.asarray(cells, int).reshape(-1, 2), axis=0, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return [[int(unique[k, 0]), int(unique[k, 1]), int(counts[k])] for k in order]


def run(args: Args) -> dict:
    start = time.time()
    scale = ogbench.scales()["cpu"]
    if not set(args.seeds) <= set(args.trained_seeds):
        raise ValueError(f"--seeds {args.seeds} must be among --trained-seeds {args.trained_seeds}")
    bench = ogbench.Args(scale="cpu", datasets=(args.dataset,), methods=ROWS, seeds=args.trained_seeds,
                         qrl_updates=args.qrl_updates, episodes_per_task=args.episodes_per_task,
                         data_root=args.data_root, out_dir=args.runs_from)
    runs = Path(args.runs_from) / "runs" / ogbench.run_name(args.dataset, "qrl", "ogbench")
    if ogbench.trained_updates(runs) < args.qrl_updates:
        raise FileNotFoundError(f"{runs} holds no QRL run at {args.qrl_updates:,} updates: train it with the ogbench "
                                f"benchmark first (--qrl-updates {args.qrl_updates} --out-dir {args.runs_from})")
    path = ogbench_maze.make_dataset(args.dataset, 0, scale.dataset_episodes, args.data_root)
    center, half = ogbench_maze.maze_extent(args.dataset)
    data = ogbench.normalised(load_dataset(path), center, half)
    stack, _ = ogbench.train_one(args.dataset, "qrl", data, scale, bench, Path(args.runs_from))
    env = ogbench_maze.make_env(ogbench_maze.get_spec(args.dataset).env_name)
    ports = teleporters(env)
    tasks = env.unwrapped.task_infos[:ogbench_maze.NUM_TASKS]
    goals = np.asarray([task["goal_xy"] for task in tasks], np.float64)
    starts = np.asarray([task["init_xy"] for task in tasks], np.float64)
    limit = float(env.unwrapped._maze_unit)  # a step moves the point about 0.2; a teleport at least a cell
    normalise = lambda x: jnp.asarray((np.asarray(x) - center) / half, jnp.float32)  # noqa: E731
    per_seed = []
    for seed in args.seeds:
        agent = stack.agent(args.trained_seeds.index(seed))
        entry = dict(seed=seed, learned=learned_costs(agent, normalise, ports, goals, starts), episodes={})
        for method in ROWS:
            row = ogbench.ROWS[method]
            policy = ogbench.policy_of(agent, center, half, row, ogbench.policy_settings(row, scale, bench),
                                       data["observations"])
            result = ogbench_maze.evaluate(policy, args.dataset, args.episodes_per_task, seed=seed,
                                           keep_trajectories=args.episodes_per_task)
            entry["episodes"][method] = episode_report(result, ports, limit, env.unwrapped.xy_to_ij)
        per_seed.append(entry)
        print(format_seed(entry), flush=True)
    record = dict(dataset=args.dataset, teleporters={k: np.asarray(v).tolist() for k, v in ports.items()},
                  goals=goals.tolist(), shortest_cells=shortest_cells(env, ports, goals),
                  walk_cells=walk_cells(env, ports, tasks), per_seed=per_seed,
                  summary=summary(per_seed))
    table = format_summary(record)
    return report.save_run(Path(args.out_dir), "platonic_rl.benchmarks.ogbench_teleport", args, record, table,
                           total_seconds=time.time() - start)


def walk_cells(env, ports: dict, tasks: list[dict]) -> list[int]:
    """Per task: the cells of the maze's shortest walk from start to goal that never enters an inbound teleporter's
    cell (-1: none)."""
    maze = env.unwrapped
    walls = np.asarray(maze.maze_map) == 1
    for xy in ports["inbound"]:
        walls[maze.xy_to_ij(xy)] = True
    out = []
    for task in tasks:
        steps = ogbench_maze.bfs_steps(np.where(walls, 1, 0), tuple(task["init_ij"]))
        out.append(int(steps[tuple(task["goal_ij"])]))
    return out


def shortest_cells(env, ports: dict, goals: np.ndarray) -> list[list[int]]:
    """Cells of the maze's shortest path (no teleporter) from each outbound teleporter to each goal; -1: none."""
    maze = env.unwrapped
    out = []
    for ij in ports["outbound_cells"]:
        steps = ogbench_maze.bfs_steps(np.asarray(maze.maze_map), tuple(ij))
        out.append([int(steps[maze.xy_to_ij(g)]) for g in goals])
    return out


def summary(per_seed: list[dict]) -> dict:
    """Mean over seeds and tasks of each row's shares."""
    keys = ("success", "teleported", "trapped")
    return {method: {k: float(np.mean([r[k] for s in per_seed for r in s["episodes"][method]])) for k in keys}
            for method in per_seed[0]["episodes"]}


def format_seed(entry: dict) -> str:
    lines = [f"seed {entry['seed']}: learned d(in, out) per inbound (rows) and outbound (columns): "
             + "; ".join(" ".join(f"{v:.1f}" for v in row) for row in entry["learned"]["in_to_out"])]
    for method, rows in entry["episodes"].items():
        lines.append(f"  {method}: " + "  ".join(
            f"task {r['task']}: {100 * r['success']:.0f}% (teleported {100 * r['teleported']:.0f}%, trapped "
            f"{100 * r['trapped']:.0f}%; failed ended in {r['failed_ends'][:3]})" for r in rows))
    return "\n".join(lines)


def format_summary(record: dict) -> str:
    lines = [f"{record['dataset']}: means over seeds and tasks"]
    for method, s in record["summary"].items():
        lines.append(f"  {method:<22} success {100 * s['success']:.1f}%  teleported {100 * s['teleported']:.1f}%  "
                     f"ended walled in {100 * s['trapped']:.1f}%")
    return "\n".join(lines)


def main(argv=None):
    import tyro

    return run(tyro.cli(Args, args=argv))


if __name__ == "__main__":
    main()
