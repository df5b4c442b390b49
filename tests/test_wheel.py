"""The built wheel installs the whole suite under platonic_rl, and a user's own ``envs``/``agents`` modules
neither shadow it nor are shadowed by it."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ~30 s (builds and installs the wheel): run with `pytest -m slow` before a release; CI installs the checkout itself.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory):
    """The wheel built from this checkout, unpacked into a folder of its own (its dependencies are this venv's)."""
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the sources: setuptools keeps build/ between builds, and stale files there would
    # end up in the wheel.
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "docs", "results", "runs", "*.egg-info",
                                                                "__pycache__", ".pytest_cache", ".hypothesis"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(out / "dist"),
                            "-q"], capture_output=True, text=True, timeout=600)
    if build.returncode:
        pytest.fail(f"building the wheel failed:\n{build.stderr[-2000:]}")
    wheels = list((out / "dist").glob("platonic_rl-*.whl"))
    assert len(wheels) == 1, wheels
    target = out / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), "-q",
                              str(wheels[0])], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-2000:]
    return target


def test_the_wheel_holds_every_package_and_the_license(installed_wheel):
    package = installed_wheel / "platonic_rl"
    for sub in ("common", "qrl", "denoised", "replearn", "envs", "agents", "training", "benchmarks"):
        assert (package / sub / "__init__.py").exists(), sub
    assert not (package / "tests").exists() and not (installed_wheel / "agents").exists()
    assert list(installed_wheel.glob("platonic_rl-*.dist-info/licenses/LICENSE"))


def test_user_modules_named_envs_and_agents_do_not_shadow_the_suite(installed_wheel, tmp_path):
    user = tmp_path / "user_project"
    for name in ("envs", "agents"):
        (user / name).mkdir(parents=True)
        (user / name / "__init__.py").write_text(f"WHOSE = 'user {name}'\n")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(installed_wheel)!r})
        import envs, agents
        from platonic_rl.envs import mountaincar
        from platonic_rl import agents as suite_agents
        import platonic_rl
        assert envs.WHOSE == "user envs" and agents.WHOSE == "user agents"
        assert platonic_rl.__file__.startswith({str(installed_wheel)!r}), platonic_rl.__file__
        assert "QRLAgent" in dir(suite_agents) and mountaincar.NUM_BINS == 160
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=user, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
    # A benchmark's --help runs from the installed wheel (PYTHONPATH comes before the editable install's finder).
    env = {**os.environ, "PYTHONPATH": str(installed_wheel)}
    help_run = subprocess.run([sys.executable, "-m", "platonic_rl.benchmarks.mountaincar", "--help"], cwd=user, env=env,
                              capture_output=True, text=True, timeout=300)
    assert help_run.returncode == 0 and "--scale" in help_run.stdout, help_run.stderr[-2000:]
    where = subprocess.run([sys.executable, "-c", "import platonic_rl; print(platonic_rl.__file__)"], cwd=user, env=env,
                           capture_output=True, text=True, timeout=300)
    assert where.stdout.startswith(str(installed_wheel)), where.stdout
