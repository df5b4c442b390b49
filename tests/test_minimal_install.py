"""The suite on a machine with only JAX, Flax, Optax, Orbax and NumPy (an accelerator image without the network): with
every other third-party package made unimportable (but SciPy, which JAX itself needs), the offline loop trains on
JAX-made maze2d data into a run directory (plain progress lines; the lock still refuses a second writer), and the
accelerator check's tiny mode runs end to end (slow)."""
import subprocess
import sys
import textwrap

import pytest

from platonic_rl.common.progress import PlainBar

# Every third-party package of the suite but JAX, Flax, Optax, Orbax (with what they need) and NumPy. SciPy is what JAX
# needs: jax and jaxlib require it, and jaxlib's CPU LAPACK kernels (QR, Cholesky, eigh: orthogonal initialisers
# among them) are SciPy's, loaded at the first such call. No install of JAX lacks it, so it is not made absent.
ABSENT = ("gymnasium", "gymnasium_robotics", "mujoco", "dm_control", "minari", "matplotlib", "tyro", "tqdm", "filelock",
          "sklearn", "imageio", "brax", "ogbench", "tensorboardX")

SCRIPT = textwrap.dedent("""
    import importlib.abc, sys
    ABSENT = set(sys.argv[1].split(","))
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ABSENT:  # what Python raises for a package that is not installed
                raise ModuleNotFoundError(f"No module named {name!r} (made absent by the test)", name=name)
    sys.meta_path.insert(0, Absent())

    import json, pathlib
    from platonic_rl.benchmarks import accelerator
    from platonic_rl.training import run as run_module
    from platonic_rl.training.run import RunDirectory, RunDirectoryInUseError
    assert run_module.FileLock is None, "filelock was importable"
    out, checkpoints = pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])

    if sys.argv[4] == "accelerator":  # the accelerator check's tiny mode: speed, device loop, a QRL slice
        accelerator.main(["--tiny", "--minutes", "1", "--out-dir", str(out), "--checkpoint-dir", str(checkpoints),
                          "--data-dir", str(out.parent / "data"), "--repeats", "2"])
        record = json.loads((out / "results.json").read_text())
        print("RECORD", json.dumps(dict(speed=record["speed"], device_loop=record["device_loop"],
                                        qrl_slice=record["qrl_slice"], files=sorted(
                                            str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()),
                                        sizes=[p.stat().st_size for p in out.rglob("*") if p.is_file()])))
    else:  # the offline loop on JAX-made data into a run directory, with the plain progress bar
        import jax
        from platonic_rl.agents import GCBCAgent, GCBCConfig
        from platonic_rl.envs import maze2d_jax_data
        from platonic_rl.envs.replay import SegmentGoalSampler
        from platonic_rl.training.offline import TrainConfig, train_offline
        data = maze2d_jax_data.generate("umaze", 2, 100, jax.random.PRNGKey(0))
        config = TrainConfig(steps=20, batch_size=16, log_every=10, checkpoint_every=10, progress=True)
        _, history = train_offline(GCBCAgent.create(GCBCConfig(obs_dim=4, action_dim=2, hidden=(8,)), 0), data,
                                   config, run_dir=checkpoints, desc="gcbc",
                                   sampler=SegmentGoalSampler.create(data, 16, p_future=1.0))
        assert [row["step"] for row in history] == [10, 20], history

    # The run directory's lock without filelock: a second writer is refused, and let in once the first closes
    holder = RunDirectory.open(checkpoints, {"x": 1}, resume=True, overwrite=True)
    try:
        RunDirectory.open(checkpoints, {"x": 1}, resume=True)
        raise SystemExit("a second writer was let in")
    except RunDirectoryInUseError as error:
        assert "is in use by process" in str(error)
    holder.close()
    RunDirectory.open(checkpoints, {"x": 1}, resume=True).close()
    print("minimal install: ok")
""")


def run_without_packages(tmp_path, what: str) -> subprocess.CompletedProcess:
    # Outside the repository: the installed package is what runs.
    result = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(ABSENT), str(tmp_path / "out"),
                             str(tmp_path / "checkpoints"), what], cwd=tmp_path, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "minimal install: ok" in result.stdout
    return result


def test_training_runs_with_only_jax_flax_optax_orbax_and_numpy(tmp_path):
    """The offline loop trains on JAX-made maze2d data into a run directory: plain progress lines instead of tqdm's,
    the run directory's lock through fcntl instead of filelock (a second writer refused)."""
    result = run_without_packages(tmp_path, "training")
    assert "gcbc: 20/20 update" in result.stderr  # the plain progress bar's closing line


@pytest.mark.slow  # about a minute, mostly compilation: the accelerator check's every part at tiny sizes
def test_the_accelerator_check_runs_with_only_jax_flax_optax_orbax_and_numpy(tmp_path):
    """``benchmarks.accelerator --tiny`` end to end where nothing but JAX and its kin can be imported: every part
    measures something, the QRL slice trains into its run directory (under the fcntl lock), and the output stays
    within 8 files of under 16 MB each."""
    import json

    result = run_without_packages(tmp_path, "accelerator")
    record = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("RECORD "))[7:])
    speed = record["speed"]
    assert speed["matmul_peak_tflops"]["float32"] > 0 and speed["matmul_peak_tflops"]["bfloat16"] > 0
    first = speed["cases"]["qrl_continuous"]["float32"]
    assert first["ms_in_scan"] > 0 and first["matmul_gflops"] > 0 and 0 < first["peak_fraction_in_scan"]
    loop = record["device_loop"]
    assert loop["point_maze_env_steps_per_second"]["64"] > 0 and loop["seeds_iteration_seconds"]["1"] > 0
    qrl = record["qrl_slice"]
    assert qrl["updates"] >= 20 and qrl["evaluations"] and qrl["dataset"]["generator"].endswith("maze2d_jax_data")
    assert {"lagrange_multiplier", "violation", "mean_goal_distance"} <= set(qrl["signals"])
    assert "results.json" in record["files"] and "slice/results.json" in record["files"]
    assert len(record["files"]) <= 8 and max(record["sizes"]) < 16 * 2 ** 20


def test_plain_bar_prints_its_state_when_closed(capsys):
    with PlainBar(total=10, initial=2, desc="work", unit="step") as bar:
        bar.update(3)
        bar.set_postfix(loss="0.5")
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == "work: 5/10 step [loss=0.5]"
    quiet = PlainBar(total=3, disable=True)
    quiet.update(3)
    quiet.close()
    assert capsys.readouterr().err == ""
