"""Dreamer and Denoised MDP trained on the device (DMC in MJX, :mod:`~platonic_rl.training.world_model_device`)
against the host loop (dm_control, :mod:`~platonic_rl.training.world_model`).

    python -m platonic_rl.benchmarks.dmc_device --parts envs throughput           # speeds, about 15 minutes
    python -m platonic_rl.benchmarks.dmc_device --parts learning --seeds 0 1 2    # cheetah's rows, long: resumable

Parts (each saved as it finishes; a rerun skips finished parts and resumes learning runs):

* ``envs``: agent steps/s of :class:`~platonic_rl.envs.dmc_jax.DMCJaxEnv` with 1, 64 and 1024 envs stepped
  together (``--env-counts``; random actions, in one jitted ``lax.scan``; compilation excluded), against the host
  :class:`~platonic_rl.envs.dmc.DMCEnv` stepped one env at a time, per task, noiseless and with the twin; env
  (control) steps/s are these times the action repeat (2). On 2 CPU cores cheetah's reset of 1024 envs stalled in
  XLA's runtime (no CPU used after compiling; 256 ran): there, pass ``--env-counts 1 64 256``.
* ``throughput``: whole-training env steps/s, one training round (100 updates, then a 1000-env-step exploration
  episode) of the device loop against the host loop's, same agent, preset, batch and schedule, steady state (each
  timed after a first call that compiles), on cheetah-run noiseless and with the twin.
* ``learning``: cheetah-run's noiseless and twin rows of the DMC table through the device loop, one program per seed
  (on 2 CPU cores, cheetah in MJX vmapped over seeds stalled in XLA's runtime: the program's threads idle, nothing
  computed; a lone seed runs), at the table's settings (the ``cpu`` preset, 100k env steps, Denoised MDP
  at beta 1 and alpha 0.3, 10 deterministic evaluation episodes every 10k env steps). The host loop's rows are in
  docs/results.md's DMC table. Each finished run keeps its record in ``records/`` beside the results (small, kept
  with them; the run directories under ``runs/`` hold checkpoints), so a later call with other seeds reuses it.

Saves ``results.json`` and ``dmc_device.png`` in ``--out-dir`` and prints the tables; speeds are this machine's,
with its float32 matmul peak measured in the same run beside them.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent
from platonic_rl.benchmarks import report, timing
from platonic_rl.benchmarks.presets import DMC_PRESETS, DMCMethodSettings, make_config
from platonic_rl.envs.dmc import EPISODE_STEPS, DMCEnv
from platonic_rl.envs.dmc_jax import DMCJaxEnv
from platonic_rl.envs.jax_env import measure_steps_per_second
from platonic_rl.envs.replay import SequenceBuffer
from platonic_rl.common.records import read_json, write_json
from platonic_rl.training.world_model import run_episode, train_chunk
from platonic_rl.training.world_model_device import (WorldModelLoopConfig, make_world_model_loop,
                                                     train_world_model_on_device)

Part = Literal["envs", "throughput", "learning"]
Method = Literal["denoised", "dreamer"]
VARIANTS = ("noiseless", "distractors")  # the table's noiseless and twin rows
RECORDS = "records"  # the finished runs' records, beside the results
LABELS = dict(noiseless="noiseless", distractors="twin", denoised="Denoised MDP", dreamer="Dreamer")
SETTINGS = DMCMethodSettings(beta=1.0, alpha=0.3)  # the table's Denoised MDP on cheetah (Dreamer ignores both)


@dataclasses.dataclass(frozen=True)
class Args:
    """DMC's world models on the device against the host loop (see the module docstring)."""
    parts: tuple[Part, ...] = ("envs", "throughput", "learning")
    methods: tuple[Method, ...] = ("dreamer", "denoised")
    variants: tuple[Literal["noiseless", "distractors"], ...] = VARIANTS
    seeds: tuple[int, ...] = (0, 1, 2)
    env_steps: int = 100_000
    """The learning runs' budget in env (control) steps, the 5000 random prefill steps included."""
    env_counts: tuple[int, ...] = (1, 64, 1024)
    """``envs``: how many envs step together."""
    out_dir: str = "results/dmc_device"
    overwrite: bool = False

    def __post_init__(self):
        for name in ("parts", "methods", "variants", "seeds", "env_counts"):
            if not getattr(self, name):
                raise ValueError(f"--{name.replace('_', '-')} needs at least one value")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"--seeds must be distinct, got {self.seeds}")
        if any(n < 1 for n in self.env_counts) or self.env_steps < 1:
            raise ValueError(f"--env-counts and --env-steps must be positive, got {self.env_counts}, {self.env_steps}")


def agent_config(method: str, env: DMCJaxEnv):
    return make_config(method, env.task, env.variant, (env.obs_dim,), env.action_dim, "cpu", SETTINGS)


def loop_config(env_steps: int, **changes) -> WorldModelLoopConfig:
    preset = DMC_PRESETS["cpu"]
    return WorldModelLoopConfig(env_steps=env_steps, batch_size=preset["batch_size"], chunk=preset["chunk"], **changes)


# ------------------------------------------------------------------------------------------------ envs


def host_steps_per_second(task: str, variant: str, steps: int = 500) -> float:
    """Agent steps/s of the host env, one env stepped with uniformly random actions (after one warm-up step)."""
    env = DMCEnv(task, variant, seed=0)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (steps + 1, env.action_space.shape[0])).astype(np.float32)
    env.step(actions[0])
    start = time.perf_counter()
    for action in actions[1:]:
        _, _, _, truncated, _ = env.step(action)
        if truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def measure_envs(args: Args) -> dict:
    out = {}
    for task in ("cheetah-run", "walker-walk", "reacher-easy"):
        for variant in ("noiseless", "distractors"):
            name = f"{task} {LABELS[variant]}"
            row = dict(host=host_steps_per_second(task, variant))
            for n in args.env_counts:
                row[f"mjx x{n}"] = measure_steps_per_second(DMCJaxEnv(task, variant), n, steps=max(4, 400 // n))
            print(f"  {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in row.items()) + " agent steps/s", flush=True)
            out[name] = row
    return out


# ------------------------------------------------------------------------------------------ throughput


def time_host_round(method: str, variant: str, repeats: int = 2) -> float:
    """Seconds of one host-loop round at the learning runs' settings: 100 updates on a buffer of random episodes
    (:func:`~platonic_rl.training.world_model.train_chunk`), then one exploration episode of the host env; the best
    of ``repeats`` after a first round that compiles."""
    env = DMCEnv("cheetah-run", variant, seed=0)
    obs_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    config = make_config(method, "cheetah-run", variant, (obs_dim,), action_dim, "cpu", SETTINGS)
    loop = loop_config(10_000)
    agent = DenoisedMDPAgent.create(config, 0)
    buffer = SequenceBuffer.create(8, EPISODE_STEPS // env.action_repeat + 1, (obs_dim,), action_dim)
    for i in range(5):
        episode = run_episode(env, seed=i)
        buffer = buffer.add(jnp.asarray(episode["observations"]), jnp.asarray(episode["prev_actions"]),
                            jnp.asarray(episode["rewards"]))
    agent = agent.with_observation_statistics(buffer.observations[:5])
    best = float("inf")
    for i in range(repeats + 1):
        start = time.perf_counter()
        agent, _ = train_chunk(agent, buffer, jax.random.PRNGKey(i), loop.updates_per_collect, loop.batch_size,
                               loop.chunk)
        run_episode(env, agent, jax.random.PRNGKey(100 + i), loop.exploration_noise, seed=10 + i)
        if i:
            best = min(best, time.perf_counter() - start)
    return best


def time_device_round(method: str, variant: str) -> float:
    """Seconds of one device-loop iteration (100 updates, then one exploration episode in MJX) at the same
    settings (:func:`~platonic_rl.benchmarks.timing.time_loop_iterations`: no evaluation is due in them)."""
    env = DMCJaxEnv("cheetah-run", variant)
    return timing.time_loop_iterations(make_world_model_loop(agent_config(method, env), env, loop_config(
        100_000, eval_every=10 ** 9)), 1)


def measure_throughput(args: Args) -> dict:
    out = {}
    for variant in args.variants:
        for method in args.methods:
            host, device = time_host_round(method, variant), time_device_round(method, variant)
            out[f"{LABELS[method]}, {LABELS[variant]}"] = dict(
                host_seconds=host, device_seconds=device, host_env_steps_per_second=1000 / host,
                device_env_steps_per_second=1000 / device, device_over_host=host / device)
            print(f"  {LABELS[method]}, {LABELS[variant]}: host {1000 / host:.0f}, device {1000 / device:.0f} env "
                  f"steps/s ({host / device:.2f}x)", flush=True)
    return out


# ------------------------------------------------------------------------------------------------ learning


def learn(args: Args, out: Path) -> dict:
    """Each (variant, method)'s seeds, one program per seed (on CPU, cheetah vmapped over seeds stalled in XLA's
    runtime: see the module docstring), each kept in ``records/<run>.json`` beside the results. A row holds the seeds
    run now and those finished before at the same budget (their records), so seeds can be run in separate calls; each
    record keeps the commit it ran at, and the row every seed's (``commits``)."""
    rows = {}
    for variant in args.variants:
        env = DMCJaxEnv("cheetah-run", variant)
        for method in args.methods:
            config, loop = agent_config(method, env), loop_config(args.env_steps)
            name = f"cheetah-run {LABELS[variant]} {LABELS[method]}"
            finished = {} if args.overwrite else finished_seeds(out, variant, method, args.env_steps)
            for seed in args.seeds:
                if seed in finished:
                    print(f"  {name} seed {seed}: finished, its record reused", flush=True)
                    continue
                run = run_name(variant, method, seed)
                run_dir, record_path = out / "runs" / run, out / RECORDS / f"{run}.json"
                settings = dict(seed=seed, env_steps=args.env_steps)
                start = time.time()
                _, history = train_world_model_on_device(config, env, loop, seed=seed, run_dir=run_dir,
                                                         overwrite=args.overwrite, desc=f"{name} s{seed}")
                evals = [r for r in history if "eval_return" in r]
                record = dict(settings=settings, commit=report.source_commit(), seconds=time.time() - start,
                              eval_steps=[r["env_steps"] for r in evals],
                              eval_return=[r["eval_return"] for r in evals],
                              train_return=[r["train_return"] for r in history])
                record_path.parent.mkdir(parents=True, exist_ok=True)
                write_json(record_path, record)
                print(f"  {name} seed {seed}: {record['eval_return'][-1]:.1f} at {args.env_steps:,} env steps "
                      f"({record['seconds']:.0f} s)", flush=True)
                # Each run compiles its own programs, and XLA's CPU code stays mapped while they are cached: six runs
                # in one process passed Linux's default limit of 65,530 memory maps (LLVM: "Cannot allocate memory").
                jax.clear_caches()
            per_seed = finished_seeds(out, variant, method, args.env_steps)
            rows[f"{variant} {method}"] = dict(
                variant=variant, method=method, eval_steps=next(iter(per_seed.values()))["eval_steps"],
                eval_return={s: r["eval_return"] for s, r in per_seed.items()},
                final={s: r["eval_return"][-1] for s, r in per_seed.items()},
                seconds={s: r["seconds"] for s, r in per_seed.items()},
                commits={s: r.get("commit") for s, r in per_seed.items()})   # None: run before records kept it
    return rows


def run_name(variant: str, method: str, seed: int | str) -> str:
    """A learning run's name: its run directory under ``runs/`` and its record under ``records/``."""
    return f"cheetah-run_{variant}_{method}_seed{seed}"


def finished_seeds(out: Path, variant: str, method: str, env_steps: int) -> dict[int, dict]:
    """The finished runs' records of (variant, method) at ``env_steps`` in ``out/records``, by seed (ascending)."""
    found = {}
    for path in (out / RECORDS).glob(f"{run_name(variant, method, '*')}.json"):
        record = read_json(path, "a finished run's record")
        if record["settings"]["env_steps"] == env_steps:
            found[record["settings"]["seed"]] = record
    return dict(sorted(found.items()))


# ------------------------------------------------------------------------------------------------ report


def format_tables(record: dict) -> str:
    lines = []
    peak = record.get("matmul_peak_flops")
    if "envs" in record:
        counts = [k for k in next(iter(record["envs"].values())) if k != "host"]
        lines.append("Agent steps/s (x2 for env steps), " + (f"float32 matmul peak {peak / 1e9:.0f} GFLOP/s" if peak
                                                           else ""))
        lines.append(f"{'env':<28}{'host':>10}" + "".join(f"{k:>12}" for k in counts))
        for name, row in record["envs"].items():
            lines.append(f"{name:<28}{row['host']:>10,.0f}" + "".join(f"{row[k]:>12,.0f}" for k in counts))
    if "throughput" in record:
        lines.append("Whole training, env steps/s (100 updates + a 1000-step episode per round)")
        for name, row in record["throughput"].items():
            lines.append(f"{name:<28} host {row['host_env_steps_per_second']:>6.0f}   device "
                         f"{row['device_env_steps_per_second']:>6.0f}   device/host {row['device_over_host']:.2f}")
    if "learning" in record:
        lines.append("cheetah-run through the device loop (mean +- std over seeds of 10 deterministic episodes)")
        for name, row in record["learning"].items():
            finals = list(row["final"].values())
            lines.append(f"{LABELS[row['variant']]:<12}{LABELS[row['method']]:<14}{np.mean(finals):>8.1f} +- "
                         f"{np.std(finals):.1f}   seeds {', '.join(f'{v:.1f}' for v in finals)}")
    return "\n".join(lines)


def seed_counts(rows: dict) -> str:
    """How many seeds the learning rows hold: one number, or their range."""
    counts = sorted({len(row["final"]) for row in rows.values()})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def plot(path: Path, record: dict, args: Args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in ("envs", "learning") if p in record]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        if panel == "envs":
            for name, row in record["envs"].items():
                counts = [int(k.split("x")[-1]) for k in row if k != "host"]
                ax.plot(counts, [row[f"mjx x{n}"] for n in counts], marker="o", label=f"{name} (MJX)")
                ax.axhline(row["host"], ls=":", lw=1, color=ax.lines[-1].get_color())
            ax.set(xscale="log", yscale="log", xlabel="envs stepped together", ylabel="agent steps / s",
                   title="DMC in MJX vs dm_control on the host (dotted), 2 CPU cores")
            ax.legend(fontsize=6)
        else:
            for name, row in record["learning"].items():
                curves = np.array(list(row["eval_return"].values()))
                line, = ax.plot(row["eval_steps"], curves.mean(0), marker="o",
                                label=f"{LABELS[row['variant']]}, {LABELS[row['method']]}")
                ax.fill_between(row["eval_steps"], curves.min(0), curves.max(0), alpha=0.2, color=line.get_color())
            ax.set(xlabel="env steps", ylabel="evaluation return (10 episodes)",
                   title=f"cheetah-run, device loop, cpu preset, {seed_counts(record['learning'])} seeds "
                         f"(band: min-max)")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: Args) -> dict:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    previous = read_json(out / "results.json", "the previous results") if (out / "results.json").is_file() else {}
    record = {k: previous[k] for k in ("envs", "throughput", "learning", "matmul_peak_flops") if k in previous}
    t0 = time.time()
    if any(p in args.parts for p in ("envs", "throughput")) and (args.overwrite or not all(
            p in record for p in args.parts if p != "learning")):
        record["matmul_peak_flops"] = timing.matmul_peak()
    for part, measure in (("envs", measure_envs), ("throughput", measure_throughput)):
        if part in args.parts and (args.overwrite or part not in record):
            print(f"{part}:", flush=True)
            record[part] = measure(args)
    if "learning" in args.parts:
        print("learning:", flush=True)
        record["learning"] = {**record.get("learning", {}), **learn(args, out)}  # earlier calls' rows kept
    return report.save_run(out, "platonic_rl.benchmarks.dmc_device", args, record, format_tables(record),
                           plots={"dmc_device.png": lambda path: plot(path, record, args)},
                           total_seconds=time.time() - t0)


def main():
    import tyro

    run(tyro.cli(Args))


if __name__ == "__main__":
    main()
