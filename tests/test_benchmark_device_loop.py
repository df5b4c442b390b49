"""The device-loop benchmark's quick scale: the learning part runs end to end (several seeds in one program, in a
resumable run directory), saves its record and plot, and a rerun resumes at the end instead of training again.
(The timing parts compile QRL programs for a minute or more on 2 cores: they run in the measurement runs, whose
commands and results are kept in docs/results/device_loop/.)"""
import json

import numpy as np

from platonic_rl.benchmarks import device_loop


def test_quick_benchmark_runs_saves_and_skips_finished_parts(tmp_path, capsys):
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("umaze",), methods=("gcbc",), seeds=2,
                            out_dir=str(tmp_path))
    record = device_loop.run(args)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.device_loop")
    curve = record["learning"]["umaze/gcbc"]
    assert curve["env_steps"] == [16 * 300 + 16 * 50 * 6, 16 * 300 + 16 * 50 * 12]  # prefill: 16 episodes of 300 steps
    success = np.asarray(curve["success"])
    assert success.shape == (2, 2) and np.all((success >= 0) & (success <= 1))
    assert (tmp_path / "learning.png").stat().st_size > 10_000
    again = device_loop.run(args)  # the run directory is at its end: nothing trains again, same curve
    assert again["learning"]["umaze/gcbc"]["success"] == curve["success"]
