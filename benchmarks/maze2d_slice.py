"""QRL at the paper's scale on one maze2d layout for a wall-clock budget, trained in resumable chunks and
evaluated in the pure-JAX point maze: the run that tells "QRL needs the paper's scale" from "QRL here is
broken" (Table 4.2, appendix C.3.2). It needs only jax, flax, optax, orbax-checkpoint and numpy where it runs
(tqdm and filelock are used where installed): the dataset is generated beforehand (MuJoCo, D4RL's procedure with its action noise)
and carried as one ``.npz``; the episodes run in :class:`~platonic_rl.envs.point_maze.PointMaze`.

    python -m platonic_rl.benchmarks.maze2d_slice --prepare-dataset data/maze2d-medium.npz --layout medium
    python -m platonic_rl.benchmarks.maze2d_slice --dataset data/maze2d-medium.npz --minutes 8 --out-dir DIR
    python -m platonic_rl.benchmarks.maze2d_slice --plot DIR/signals.png DIR/results.json   # where matplotlib is

Training runs in chunks of ``--chunk`` updates into ``<out-dir>/run`` (or ``--run-dir``); a later call with
the same settings continues from the latest checkpoint, up to ``--updates`` in all. A chunk starts only if
the time left (``--minutes`` minus what has run, minus the evaluation's reserve) fits it. After the first
chunk and at the end the agent is evaluated: its actor (the mode action, single and multi goal, D4RL-normalised
score), and its critic alone acting greedily with the *true* dynamics -- the action of a 9x9 grid whose true
next state has the smallest learned distance to the goal (max over critics): the critic-quality check,
independent of the actor and the learned model. ``results.json`` holds the settings, the scale reached
(updates, samples, updates/s), the convergence signals (Lagrange multiplier, constraint violation, mean
goal distance) with their change over the last 20% of updates, and the scores at each evaluation.

Episodes here run in the JAX point maze (equal to MuJoCo's step away from walls, slightly different at wall
contacts: see :mod:`~platonic_rl.envs.point_maze`); its multi-goal goals are never the start's cell.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from platonic_rl.agents.qrl_continuous import QRLContinuousConfig
from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import maze2d_slice_sizes
from platonic_rl.benchmarks.qrl_slice import SliceSetting, format_table, plot, signal_plots, train_slice
from platonic_rl.envs import maze2d


@dataclasses.dataclass(frozen=True)
class Args:
    layout: str = "medium"
    dataset: str | None = None
    """The ``.npz`` written by ``--prepare-dataset`` (required unless preparing one)."""
    prepare_dataset: str | None = None
    """Generate the layout's D4RL-procedure dataset (MuJoCo; ``--dataset-size`` transitions, action noise 0.5)
    into this ``.npz`` and stop."""
    dataset_size: int | None = None
    """Transitions of a prepared dataset (default: D4RL's size for the layout)."""
    dataset_seed: int = 0
    size: str = "paper"
    """``paper``: C.3.2's QRL (critic 3x1024, IQE-maxmean 64x32, actor 4x1024, batch 4096); ``cpu``: the maze2d
    benchmark's cpu preset (2x128 MLPs, IQE-maxmean 16x16, batch 256, actor lr 3e-4); ``tiny``: a smoke size
    for CPUs and tests (NOT comparable to anything)."""
    width: int | None = None
    """Every hidden layer of the size's critic encoder, dynamics model, projector and actor at this width, their
    depths and the IQE head kept (as the speed report's ``maze2d_qrl_w<W>_b<B>`` cases); default: the size's own."""
    batch_size: int | None = None
    """Transitions per update; default: the size's own."""
    updates: int = 200_000
    """Updates in all (C.3.2: 2e5); a run stops earlier when the time budget ends."""
    chunk: int = 5_000
    """Updates per chunk (a checkpoint after each)."""
    minutes: float = 8.0
    """Wall-clock budget of the whole command, evaluations included."""
    eval_reserve: float = 60.0
    """Seconds kept for the final evaluation and saving."""
    episodes: int = 100
    """Evaluation episodes per setting (single goal, multi goal)."""
    episode_length: int = 0
    """Steps per evaluation episode; 0: the layout's D4RL time limit (shorter: a smoke run, scores not D4RL's)."""
    seed: int = 0
    out_dir: str = "results/maze2d_slice"
    run_dir: str | None = None
    """Default: <out_dir>/run."""
    plot: tuple[str, ...] = ()
    """``OUT.png RESULTS.json [RESULTS.json ...]``: only draw one picture of a run's calls (where matplotlib is)."""

    def __post_init__(self):
        if self.episode_length < 0:
            raise ValueError(f"--episode-length must be >= 0 (0: the layout's limit), got {self.episode_length}")
        for name in ("updates", "chunk", "episodes", "width", "batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.updates % self.chunk:
            raise ValueError(f"--updates={self.updates} must be a multiple of --chunk={self.chunk}")
        if self.size not in maze2d_slice_sizes():
            raise ValueError(f"--size must be one of {list(maze2d_slice_sizes())}, got {self.size!r}")
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}")
        if self.plot and len(self.plot) < 2:
            raise ValueError(f"--plot needs OUT.png and at least one results.json, got {list(self.plot)}")
        if self.dataset is None and self.prepare_dataset is None and not self.plot:
            raise ValueError("--dataset (a prepared .npz) or --prepare-dataset PATH is required")
        maze2d.get_layout(self.layout)


def agent_setting(args: Args) -> tuple[QRLContinuousConfig, int, str]:
    """The QRL config, the batch size and a label of the run's size (``--size``, ``--width``, ``--batch-size``)."""
    config, batch = maze2d_slice_sizes()[args.size]
    label = args.size
    if args.width is not None:
        w = args.width
        config = dataclasses.replace(config, encoder_hidden=(w,) * len(config.encoder_hidden),
                                     dynamics_hidden=(w,) * len(config.dynamics_hidden),
                                     projector_hidden=(w,) * len(config.projector_hidden),
                                     actor_hidden=(w,) * len(config.actor_hidden))
        label += f" at width {w}"
    if args.batch_size is not None:
        batch = args.batch_size
        label += f", batch {batch}"
    return config, batch, label


# ---------------------------------------------------------------------------------------------- run


def run(args: Args) -> dict:
    start = time.time()
    config, batch, label = agent_setting(args)
    data, info = maze2d.load_prepared(args.dataset, args.layout)
    setting = SliceSetting(config, batch, label, layout=args.layout, updates=args.updates, chunk=args.chunk,
                           eval_reserve=args.eval_reserve, episodes=args.episodes, episode_length=args.episode_length,
                           seed=args.seed)
    record = train_slice(setting, data, info, run_dir=args.run_dir or Path(args.out_dir) / "run",
                         deadline=start + 60.0 * args.minutes)
    record = dict(record, size=args.size)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return report.save_run(out, "platonic_rl.benchmarks.maze2d_slice", args, record, format_table(record),
                           plots=signal_plots(record), total_seconds=time.time() - start)


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(prog="python -m platonic_rl.benchmarks.maze2d_slice",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        flag = "--" + field.name.replace("_", "-")
        if field.name == "plot":
            parser.add_argument(flag, nargs="+", default=())
        else:
            kind = {"int": int, "float": float}.get(str(field.type).split(" |")[0], str)
            parser.add_argument(flag, type=kind, default=field.default)
    values = vars(parser.parse_args(argv))
    values["plot"] = tuple(values["plot"])
    return Args(**values)


def main(argv=None):
    args = parse_args(argv)
    if args.plot:
        plot(args.plot[0], [json.loads(Path(p).read_text()) for p in args.plot[1:]])
        return None
    if args.prepare_dataset is not None:
        info = maze2d.prepare_dataset(args.prepare_dataset, args.layout, args.dataset_size, args.dataset_seed)
        print(f"saved {args.prepare_dataset}: {info}")
        return info
    return run(args)


if __name__ == "__main__":
    main()
