"""One prepared accelerator check: does the suite run on this machine, how fast, and does QRL at the paper's scale
learn -- one command inside a time budget.

    python -m platonic_rl.benchmarks.accelerator --out-dir DIR [--minutes 9] [--checkpoint-dir DIR]
    python -m platonic_rl.benchmarks.accelerator --tiny --out-dir DIR      # small sizes for CPUs (the test suite)

It needs only JAX (0.10 or newer, with its GPU or TPU plugin), Flax, Optax, Orbax and NumPy. From a plain copy of
the repository (the repository folder is the ``platonic_rl`` package), without touching what is installed:
``mkdir -p /tmp/pkg && ln -s "$PWD" /tmp/pkg/platonic_rl && export PYTHONPATH=/tmp/pkg``
(``tests/test_minimal_install.py`` runs the ``--tiny`` mode with every other package made unimportable). Nothing is downloaded; the data is generated on the machine in JAX. Parts, in order:

1. **Speed**: the float32 and bfloat16 matmul peaks of the device (the best of large square matmuls), then every
   agent's update at its paper size (Fetch's QRL of C.3.3, maze2d's QRL of C.3.2, MountainCar's discrete QRL of
   C.3.1, Contrastive RL, GCBC, DDPG+HER, Denoised MDP and Dreamer at Table D.4's sizes), in float32 and bfloat16
   (``compute_dtype``: the networks in bfloat16, parameters and losses in float32): ms per update as one call and inside a ``lax.scan`` of updates,
   samples/s, the matmul FLOPs counted from the update's jaxpr and their share of the measured peak of the same
   dtype.
2. **Device loop**: env steps/s of the JAX point maze with 1k, 16k and 128k envs in one scan, and the seconds per
   iteration of the QRL device loop with 1, 4 and 16 seeds vmapped in one program.
3. **QRL slice**: maze2d medium generated here (:mod:`~platonic_rl.envs.maze2d_jax_data`: D4RL's procedure with its
   action noise, 2M transitions), C.3.2's QRL (critic 3 x 1024, IQE 64 x 32, actor 4 x 1024, batch 4096) trained for
   the rest of the budget by :mod:`~platonic_rl.benchmarks.qrl_slice` (chunks with checkpoints, the actor's and
   the critic-alone scores, single and multi goal, the convergence signals). With ``--checkpoint-dir`` a later call
   continues the run from its last checkpoint.

Each part stops starting new measurements when its share of ``--minutes`` is spent (after at least one; what it
skipped is listed), and the slice trains only while chunks fit, so the command ends inside the budget give or take
the compilations of its first measurements (the ``--tiny`` mode on a CPU is all compilation and overruns a short
budget). Output in ``--out-dir``: ``results.json`` and ``speed.png`` (where matplotlib
is), and the slice's ``slice/results.json`` and ``slice/signals.png``; checkpoints and the data go elsewhere
(``--checkpoint-dir``, ``--data-dir``; temporary folders by default).
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.presets import (device_loop_agent_config, device_loop_env, device_loop_scales, maze2d_scales,
                                           maze2d_slice_sizes)
from platonic_rl.benchmarks.qrl_slice import SliceSetting, signal_plots, train_slice
from platonic_rl.benchmarks.qrl_slice import format_table as format_slice
from platonic_rl.benchmarks.timing import (discrete_batch, goal_batch, matmul_peak, sequence_batch, time_device_loop,
                                          time_update)

MODULE = "platonic_rl.benchmarks.accelerator"
SPEED_SHARE, DEVICE_LOOP_SHARE = 0.3, 0.15  # of --minutes; the QRL slice gets the rest


@dataclasses.dataclass(frozen=True)
class Args:
    out_dir: str = "results/accelerator"
    minutes: float = 9.0
    tiny: bool = False
    """Small sizes for CPUs (NOT comparable to anything): the test suite's mode."""
    checkpoint_dir: str | None = None
    """The QRL slice's run directory (default: a temporary folder); a later call with it continues the run."""
    data_dir: str | None = None
    """Where the generated maze2d dataset is kept and reused (default: a temporary folder)."""
    repeats: int = 5
    scan_length: int = 10

    def __post_init__(self):
        if not self.minutes > 0:
            raise ValueError(f"--minutes must be > 0, got {self.minutes}")
        for name in ("repeats", "scan_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class Sizes:
    env_counts: tuple[int, ...]
    env_steps: int
    seed_counts: tuple[int, ...]
    device_loop_scale: str             # benchmarks.device_loop's scale for the seeds' iteration
    slice_size: str                    # a name of presets.maze2d_slice_sizes()
    trajectories: int                  # the generated dataset: trajectories x steps
    trajectory_steps: int
    slice_chunk: int
    slice_episodes: int
    slice_episode_length: int          # 0: the layout's time limit


SIZES = {
    False: Sizes((1024, 16_384, 131_072), 100, (1, 4, 16), "cpu", "paper", 1000, 2000, 2000, 100, 0),
    True: Sizes((64, 256), 20, (1, 2), "quick", "tiny", 4, 500, 20, 4, 50),
}


# -------------------------------------------------------------------------------------------------- speed


def speed_cases(tiny: bool) -> list[tuple[str, str, object, int, tuple[str, ...]]]:
    """(name, size label, build(dtype) -> (agent, batch), samples per update, dtypes) of every agent."""
    from platonic_rl.agents import (CRLAgent, CRLConfig, DDPGHERAgent, DDPGHERConfig, DenoisedMDPAgent,
                                    DenoisedMDPConfig, GCBCAgent, GCBCConfig, QRLAgent, QRLConfig, QRLContinuousAgent,
                                    QRLContinuousConfig)
    from platonic_rl.denoised.model import WorldModelConfig

    both = ("float32", "bfloat16")
    if tiny:
        small = dict(encoder_hidden=(32,), latent_dim=16, projector_hidden=(32,), iqe_components=4,
                     iqe_dim_per_component=8, dynamics_hidden=(32,), actor_hidden=(32,))
        model = dict(obs_shape=(5,), action_dim=2, x_belief=16, x_state=4, y_belief=8, y_state=2, hidden=16,
                     embed_dim=16, mlp_encoder_hidden=(16,), mlp_decoder_hidden=(16,))
        heads = dict(actor_hidden=(16,), critic_hidden=(16,), horizon=3, imagine_starts=8)
        return [
            ("qrl_continuous", "tiny", lambda dt: (QRLContinuousAgent.create(
                QRLContinuousConfig(**small, compute_dtype=dt), 0), goal_batch(64, 10, 4)), 64, both),
            ("gcbc", "tiny", lambda dt: (GCBCAgent.create(GCBCConfig(hidden=(32,), compute_dtype=dt), 0),
                                         goal_batch(64, 10, 4)), 64, both),
            ("denoised_mdp", "tiny", lambda dt: (DenoisedMDPAgent.create(DenoisedMDPConfig(
                model=WorldModelConfig(**model, compute_dtype=dt), **heads), 0), sequence_batch(4, 6, 5, 2)), 24, both),
        ]
    paper_qrl = maze2d_scales()["paper"].qrl
    world = dict(obs_shape=(17,), action_dim=6)  # cheetah-run from states, Table D.4's sizes (the defaults)
    return [
        ("qrl_continuous_fetch", "Fetch, C.3.3 (IQE 64x32, 2 critics, batch 256)", lambda dt: (
            QRLContinuousAgent.create(QRLContinuousConfig(compute_dtype=dt), 0), goal_batch(256, 10, 4)), 256, both),
        ("qrl_continuous_maze2d", "maze2d, C.3.2 (critic 3x1024, IQE 64x32, actor 4x1024, batch 4096)", lambda dt: (
            QRLContinuousAgent.create(dataclasses.replace(paper_qrl, compute_dtype=dt), 0), goal_batch(4096, 4, 2)),
         4096, both),
        ("qrl_mountaincar", "MountainCar, C.3.1 (batch 1024)", lambda dt: (
            QRLAgent.create(QRLConfig(compute_dtype=dt), 0), discrete_batch(1024, 3, 3)), 1024, both),
        ("crl", "Fetch, default (batch 256)", lambda dt: (CRLAgent.create(CRLConfig(compute_dtype=dt), 0),
                                                          goal_batch(256, 10, 4)), 256, both),
        ("gcbc", "Fetch, default (batch 256)", lambda dt: (GCBCAgent.create(GCBCConfig(compute_dtype=dt), 0),
                                                           goal_batch(256, 10, 4)), 256, both),
        ("ddpg_her", "Fetch, default (batch 256)", lambda dt: (DDPGHERAgent.create(DDPGHERConfig(compute_dtype=dt), 0),
                                                               goal_batch(256, 10, 4)), 256, both),
        ("denoised_mdp", "cheetah states, Table D.4 (50 x 50 steps)", lambda dt: (DenoisedMDPAgent.create(
            DenoisedMDPConfig(model=WorldModelConfig(**world, compute_dtype=dt)), 0), sequence_batch(50, 50, 17, 6)),
         2500, both),
        ("dreamer", "cheetah states, Table D.4 (220 + 33 latent, 50 x 50 steps)", lambda dt: (DenoisedMDPAgent.create(
            DenoisedMDPConfig.dreamer(WorldModelConfig(**world, x_belief=220, x_state=33, compute_dtype=dt)), 0),
            sequence_batch(50, 50, 17, 6)), 2500, both),
    ]


def measure_speed(args: Args, deadline: float) -> dict:
    sizes = (256, 512) if args.tiny else (4096, 8192)
    peaks = {dt: matmul_peak(dt, sizes, args.repeats) for dt in ("float32", "bfloat16")}
    cases, skipped = {}, []
    for name, label, build, samples, dtypes in speed_cases(args.tiny):
        for dtype in dtypes:
            if cases and time.time() > deadline:  # at least one measurement, however short the budget
                skipped.append(f"{name} {dtype}")
                continue
            agent, batch = build(dtype)
            cases.setdefault(name, dict(size=label, samples=samples))[dtype] = time_update(
                agent, batch, samples, args.repeats, args.scan_length, peaks[dtype])
            print(f"  {name} {dtype}: {cases[name][dtype]['ms_in_scan']:.2f} ms per update in a scan", flush=True)
        if "bfloat16" in cases.get(name, {}) and "float32" in cases[name]:
            cases[name]["bf16_speedup"] = cases[name]["float32"]["ms_in_scan"] / cases[name]["bfloat16"]["ms_in_scan"]
    return dict(matmul_peak_tflops={dt: p / 1e12 for dt, p in peaks.items()},
                bf16_peak_ratio=peaks["bfloat16"] / peaks["float32"], cases=cases, skipped=skipped)


# --------------------------------------------------------------------------------------------- device loop


def measure_device_loop(args: Args, sizes: Sizes, deadline: float) -> dict:
    from platonic_rl.envs import jax_env
    from platonic_rl.envs.point_maze import PointMaze

    env_steps, skipped = {}, []
    for n in sizes.env_counts:
        if env_steps and time.time() > deadline:
            skipped.append(f"{n} envs")
            continue
        env_steps[str(n)] = jax_env.measure_steps_per_second(PointMaze("umaze"), n, sizes.env_steps)
        print(f"  point maze, {n} envs: {env_steps[str(n)]:,.0f} env steps/s", flush=True)
    scale = device_loop_scales()[sizes.device_loop_scale]
    env = device_loop_env("umaze")
    config = device_loop_agent_config("qrl", scale, env.obs_dim, env.action_dim)
    seeds = {}
    for n in sizes.seed_counts:
        if seeds and time.time() > deadline:
            skipped.append(f"{n} seeds")
            continue
        seeds[str(n)] = time_device_loop(config, env, scale.seeds_config, scale.measure_iterations, num_seeds=n)
        print(f"  device loop, {n} seeds vmapped: {seeds[str(n)]:.3f} s per iteration", flush=True)
    first = seeds.get(str(sizes.seed_counts[0]))
    return dict(point_maze_env_steps_per_second=env_steps, seeds_iteration_seconds=seeds,
                seeds_cost_vs_one={k: v / first for k, v in seeds.items()} if first else {},
                seeds_loop=dataclasses.asdict(scale.seeds_config), skipped=skipped)


# ------------------------------------------------------------------------------------------------ QRL slice


def prepare_data(sizes: Sizes, data_dir: Path) -> Path:
    """maze2d medium generated in JAX (kept in ``data_dir`` and reused by a later call)."""
    from platonic_rl.envs import maze2d, maze2d_jax_data

    path = data_dir / f"maze2d-medium-jax-{sizes.trajectories}x{sizes.trajectory_steps}-seed0.npz"
    if not path.exists():
        start = time.time()
        data = maze2d_jax_data.generate("medium", sizes.trajectories, sizes.trajectory_steps, jax.random.PRNGKey(0))
        info = dict(layout="medium", transitions=len(data["actions"]), seed=0, action_noise=maze2d.ACTION_NOISE,
                    episodes=int(data["segment_end"].sum()), generator="platonic_rl.envs.maze2d_jax_data",
                    trajectories=sizes.trajectories, generation_seconds=round(time.time() - start, 1))
        partial = path.with_name(path.stem + ".partial.npz")  # renamed when whole: an interrupted write is no file
        maze2d.save_prepared_transitions(partial, data, info)
        partial.replace(path)
        print(f"  generated {info['transitions']:,} transitions in {info['generation_seconds']} s", flush=True)
    return path


def run_slice(args: Args, sizes: Sizes, minutes: float, out: Path) -> dict:
    """The QRL slice (:mod:`~platonic_rl.benchmarks.qrl_slice`) at ``sizes.slice_size`` for ``minutes``, saved in
    ``out/slice``; returns the part of its record the check's own ``results.json`` keeps."""
    from platonic_rl.envs import maze2d

    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="platonic_rl_data_"))
    run_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else Path(tempfile.mkdtemp(prefix="platonic_rl_run_"))
    start = time.time()
    path = prepare_data(sizes, data_dir)
    data, info = maze2d.load_prepared(path, "medium")
    config, batch = maze2d_slice_sizes()[sizes.slice_size]
    setting = SliceSetting(config, batch, sizes.slice_size, layout="medium",
                           updates=200_000 if not args.tiny else 2 * sizes.slice_chunk, chunk=sizes.slice_chunk,
                           eval_reserve=60.0 if not args.tiny else 5.0, episodes=sizes.slice_episodes,
                           episode_length=sizes.slice_episode_length)
    record = train_slice(setting, data, info, run_dir, deadline=start + 60.0 * max(minutes, 0.1))
    report.save_run(out / "slice", "platonic_rl.benchmarks.accelerator", args, record, format_slice(record),
                    plots=signal_plots(record), total_seconds=time.time() - start)
    keep = ("size_label", "updates", "samples", "fraction_of_paper_samples", "updates_per_second",
            "samples_per_second", "signals", "evaluations", "dataset")
    return {k: record[k] for k in keep if k in record}


# ------------------------------------------------------------------------------------------------- report


def format_table(record: dict) -> str:
    device = record["device"]
    lines = [f"Accelerator check on {device['count']} x {device['kind']} ({device['backend']})"
             + (" -- TINY sizes, NOT comparable to anything" if record["tiny"] else "")]
    speed = record.get("speed")
    if speed:
        peak = speed["matmul_peak_tflops"]
        lines.append(f"matmul peak (JAX's default precision: float32 may run as TF32 on GPUs): float32 "
                     f"{peak['float32']:.2f} TFLOP/s, bfloat16 {peak['bfloat16']:.2f} TFLOP/s "
                     f"({speed['bf16_peak_ratio']:.2f}x)")
        lines.append(f"{'update':<24}{'dtype':>10}{'ms (call)':>11}{'ms (scan)':>11}{'samples/s':>13}{'% peak':>8}")
        for name, case in speed["cases"].items():
            for dtype in ("float32", "bfloat16"):
                if dtype in case:
                    c = case[dtype]
                    lines.append(f"{name:<24}{dtype:>10}{c['ms_one_call']:>11.2f}{c['ms_in_scan']:>11.2f}"
                                 f"{c['samples_per_s']:>13,.0f}{100 * c['peak_fraction_in_scan']:>7.1f}%")
            if "bf16_speedup" in case:
                lines.append(f"{'':<24}{'bf16/f32':>10}  {case['bf16_speedup']:.2f}x faster in a scan")
        if speed["skipped"]:
            lines.append(f"skipped (budget): {', '.join(speed['skipped'])}")
    loop = record.get("device_loop")
    if loop:
        lines.append("point maze env steps/s: " + ", ".join(
            f"{n} envs {v:,.0f}" for n, v in loop["point_maze_env_steps_per_second"].items()))
        lines.append("QRL device loop, s per iteration: " + ", ".join(
            f"{n} seeds {v:.3f} ({loop['seeds_cost_vs_one'][n]:.2f}x)" for n, v in loop["seeds_iteration_seconds"].items()))
        if loop["skipped"]:
            lines.append(f"skipped (budget): {', '.join(loop['skipped'])}")
    qrl = record.get("qrl_slice")
    if qrl:
        last = qrl["evaluations"][-1] if qrl.get("evaluations") else {}
        lines.append(f"QRL slice (maze2d medium, {qrl['size_label']}): {qrl['updates']:,} updates "
                     f"({100 * qrl['fraction_of_paper_samples']:.1f}% of the paper's samples, "
                     f"{qrl['updates_per_second']:.1f} updates/s); last scores: " + ", ".join(
                         f"{k} {v:.1f}" for k, v in last.items() if k != "updates"))
    return "\n".join(lines)


def plot_speed(path: Path, record: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = record["speed"]["cases"]
    names = list(cases)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names)), 4.0))
    x = np.arange(len(names))
    for offset, dtype, color in ((-0.2, "float32", "C0"), (0.2, "bfloat16", "C1")):
        values = [100 * cases[n][dtype]["peak_fraction_in_scan"] if dtype in cases[n] else np.nan for n in names]
        ax.bar(x + offset, values, width=0.4, color=color, label=dtype)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("matmul FLOPs / measured peak of the dtype (%)")
    device = record["device"]
    ax.set_title(f"Updates in a scan, {device['kind']} ({'tiny sizes' if record['tiny'] else 'paper sizes'})",
                 fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: Args) -> dict:
    start = time.time()
    budget = 60.0 * args.minutes
    sizes = SIZES[args.tiny]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    devices = jax.devices()
    record = dict(tiny=args.tiny, device=dict(backend=jax.default_backend(), kind=devices[0].device_kind,
                                              count=len(devices)), sizes=dataclasses.asdict(sizes))
    print(f"accelerator check: {record['device']}, {args.minutes} min", flush=True)
    print("speed", flush=True)
    record["speed"] = measure_speed(args, start + SPEED_SHARE * budget)
    print("device loop", flush=True)
    record["device_loop"] = measure_device_loop(args, sizes, time.time() + DEVICE_LOOP_SHARE * budget)
    print("QRL slice", flush=True)
    # The rest, less a margin to save; at least one chunk and its evaluation (maze2d_slice's first), however late.
    left = (start + budget - time.time()) / 60.0 - (0.1 if args.tiny else 0.5)
    record["qrl_slice"] = run_slice(args, sizes, max(left, 0.1), out)
    try:  # where matplotlib is missing (accelerator images), the numbers are in results.json
        import matplotlib  # noqa: F401
        plots = {"speed.png": lambda p: plot_speed(p, record)}
    except ImportError:
        plots = None
    return report.save_run(out, MODULE, args, record, format_table(record), plots=plots,
                           total_seconds=time.time() - start)


def parse_args(argv=None) -> Args:
    defaults = Args()
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=defaults.out_dir)
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="the whole command's budget")
    parser.add_argument("--tiny", action="store_true", help="small sizes for CPUs (NOT comparable to anything)")
    parser.add_argument("--checkpoint-dir", default=None, help="the QRL slice's run directory (continued if it "
                        "holds a run)")
    parser.add_argument("--data-dir", default=None, help="where the generated dataset is kept and reused")
    parser.add_argument("--repeats", type=int, default=defaults.repeats)
    parser.add_argument("--scan-length", type=int, default=defaults.scan_length)
    return Args(**{k.replace("-", "_"): v for k, v in vars(parser.parse_args(argv)).items()})


def main(argv=None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    main()
