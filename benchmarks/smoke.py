"""Every benchmark's smoke run, timed as a new user meets it: each command in its own process, with datasets
generated afresh into a temporary folder, beside this machine's float32 matmul rate measured before and after.

    python -m platonic_rl.benchmarks.smoke                         # all of them (about 16 min on 2 CPU cores at 213 GFLOP/s)
    python -m platonic_rl.benchmarks.smoke --runs mountaincar maze2d

A smoke run checks that a benchmark runs end to end on this machine; its numbers are not comparable to anything.
Each should take at most about 2 minutes on 2 CPU cores; the table says which do, and ``results.json`` keeps each
command, its seconds and its exit status. Runtimes differ up to four times between machines of this kind: compare
them with the matmul rate beside them.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from platonic_rl.benchmarks import report
from platonic_rl.benchmarks.timing import matmul_peak

# name -> the benchmark's arguments after ``python -m platonic_rl.benchmarks.<module>`` (its default scale where
# that is the smoke one, else the smoke preset named). The output folder is added per run.
SMOKE_RUNS: dict[str, tuple[str, ...]] = {
    "mountaincar": ("mountaincar",),
    "quasimetric_learning": ("quasimetric_learning",),
    "representations": ("representations",),
    "maze2d": ("maze2d", "--scale", "quick"),
    "ogbench": ("ogbench", "--scale", "tiny", "--datasets", "pointmaze-medium-stitch-v0"),
    "own_dataset": ("own_dataset", "--methods", "gcbc", "qrl_offline_scaled", "--seeds", "0", "--updates", "500"),
    "device_loop": ("device_loop", "--scale", "quick"),
    "convergence": ("convergence", "--scale", "quick"),
    "speed": ("speed", "--scale", "quick"),
    "accelerator": ("accelerator", "--tiny", "--minutes", "1"),
}
SMOKE_SECONDS = 120  # what a smoke run may take on 2 CPU cores


@dataclasses.dataclass(frozen=True)
class Args:
    runs: tuple[str, ...] = tuple(SMOKE_RUNS)
    """Which smoke runs (default: all)."""
    timeout: int = 1200
    """Seconds after which a run is stopped and reported as such."""
    out_dir: str = "results/smoke"

    def __post_init__(self):
        unknown = sorted(set(self.runs) - set(SMOKE_RUNS))
        if unknown or not self.runs:
            raise ValueError(f"--runs must name some of {list(SMOKE_RUNS)}, got {list(self.runs)}")
        if self.timeout < 1:
            raise ValueError(f"--timeout must be a positive number of seconds, got {self.timeout}")


def smoke_command(name: str, out_dir: Path) -> list[str]:
    """The full command of smoke run ``name``, writing into ``out_dir``."""
    module, *arguments = SMOKE_RUNS[name]
    return [sys.executable, "-m", f"platonic_rl.benchmarks.{module}", *arguments, "--out-dir", str(out_dir)]


def time_command(argv: list[str], timeout: int, env: dict) -> dict:
    """Run ``argv`` in its own process: seconds, exit status (None when stopped at ``timeout``), output's tail."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        status, tail = done.returncode, (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        status, tail = None, f"stopped after {timeout} s"
    return dict(seconds=time.perf_counter() - start, status=status, tail=tail)


def format_table(rows: dict, rates: list[float]) -> str:
    lines = [f"Smoke runs, each in its own process with fresh datasets; float32 matmul "
             f"{min(rates) / 1e9:.0f}-{max(rates) / 1e9:.0f} GFLOP/s (before / after)",
             f"{'run':<22}{'seconds':>9}  {'status':<10}within {SMOKE_SECONDS} s"]
    for name, row in rows.items():
        status = "stopped" if row["status"] is None else ("ok" if row["status"] == 0 else f"exit {row['status']}")
        lines.append(f"{name:<22}{row['seconds']:>9.0f}  {status:<10}{'yes' if row['seconds'] <= SMOKE_SECONDS else 'NO'}")
    return "\n".join(lines)


def run(args: Args) -> dict:
    start = time.time()
    rates = [matmul_peak()]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="platonic_rl_smoke_") as scratch:
        env = dict(os.environ, PLATONIC_RL_DATA=str(Path(scratch) / "data"))  # datasets generated afresh
        for name in args.runs:
            argv = smoke_command(name, Path(scratch) / name)
            print(f"{name}: {' '.join(argv[1:])}", flush=True)
            rows[name] = dict(command="python3 " + " ".join(argv[1:-2]), **time_command(argv, args.timeout, env))
            print(f"  {rows[name]['seconds']:.0f} s, exit status {rows[name]['status']}", flush=True)
    rates.append(matmul_peak())
    record = dict(smoke_runs=rows, matmul_flops=rates, smoke_seconds=SMOKE_SECONDS)
    return report.save_run(args.out_dir, "platonic_rl.benchmarks.smoke", args, record, format_table(rows, rates),
                           total_seconds=time.time() - start)


def main(argv=None):
    import tyro

    return run(tyro.cli(Args, args=argv))


if __name__ == "__main__":
    main()
