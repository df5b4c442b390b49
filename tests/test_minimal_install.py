"""The training path on a machine with only JAX, Flax, Optax, Orbax and NumPy (an accelerator image without the
network): with every other third-party package made unimportable, the offline loop trains into a run directory whose
lock still refuses a second writer, the progress bar falls back to plain lines, and JAX-made maze2d data loads."""
import subprocess
import sys
import textwrap

from platonic_rl.common.progress import PlainBar

# Every third-party package of the suite but JAX, Flax, Optax, Orbax (with what they need) and NumPy.
ABSENT = ("gymnasium", "gymnasium_robotics", "mujoco", "dm_control", "minari", "matplotlib", "tyro", "tqdm", "filelock",
          "scipy", "sklearn", "imageio", "brax", "ogbench", "tensorboardX")

SCRIPT = textwrap.dedent("""
    import importlib.abc, sys
    ABSENT = set(sys.argv[1].split(","))
    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ABSENT:
                raise ImportError(f"No module named {name!r} (made absent by the test)")
    sys.meta_path.insert(0, Absent())

    import jax
    from platonic_rl.agents import QRLContinuousAgent, QRLContinuousConfig
    from platonic_rl.envs import maze2d_jax_data
    from platonic_rl.envs.replay import SegmentGoalSampler
    from platonic_rl.training import run as run_module
    from platonic_rl.training.offline import TrainConfig, train_offline
    from platonic_rl.training.run import RunDirectory, RunDirectoryInUseError
    assert run_module.FileLock is None, "filelock was importable"

    data = maze2d_jax_data.generate("umaze", 2, 200, jax.random.PRNGKey(0))
    data["rewards"] = data["rewards"] - 1.0
    config = QRLContinuousConfig(obs_dim=4, action_dim=2, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                                 iqe_components=2, iqe_dim_per_component=4, dynamics_hidden=(16,), actor_hidden=(16,))
    agent = QRLContinuousAgent.create(config, 0)
    run_dir = sys.argv[2]
    agent, history = train_offline(agent, data, TrainConfig(steps=20, batch_size=32, log_every=10, checkpoint_every=10,
                                                            progress=True), run_dir=run_dir,
                                   sampler=SegmentGoalSampler.create(data, 32))
    assert [row["step"] for row in history] == [10, 20], history
    holder = RunDirectory.open(run_dir, {"x": 1}, resume=True, overwrite=True)
    try:
        RunDirectory.open(run_dir, {"x": 1}, resume=True)
        raise SystemExit("a second writer was let in")
    except RunDirectoryInUseError as error:
        assert "is in use by process" in str(error)
    holder.close()
    RunDirectory.open(run_dir, {"x": 1}, resume=True).close()  # free again once closed
    print("minimal install: ok")
""")


def test_training_runs_with_only_jax_flax_optax_orbax_and_numpy(tmp_path):
    # Outside the repository: the installed package is what runs.
    result = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(ABSENT), str(tmp_path / "run")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "minimal install: ok" in result.stdout
    assert "train: 20/20 update" in result.stderr  # the plain progress bar's closing line


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
