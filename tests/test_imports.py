"""Every module of the suite imports on its own, in a fresh interpreter.

An import cycle only shows when a module is the first of ours to be imported (``import denoised.model``
used to fail unless ``agents`` had been imported before it), so each module gets its own interpreter.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def suite_modules() -> list[str]:
    """Every module of every package pyproject.toml installs (``platonic_rl.<sub>`` lives in folder ``<sub>``)."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    modules = []
    for package in packages:
        folder = ROOT.joinpath(*package.split(".")[1:])
        modules.append(package)
        modules += [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]
    return modules


# Third-party packages the suite's modules import, loaded once before the forks (only a speed-up: none of
# ours is loaded before a fork, so an import cycle among ours still shows).
THIRD_PARTY = ("numpy", "scipy.stats", "jax", "jax.numpy", "flax.linen", "optax", "chex", "orbax.checkpoint",
               "gymnasium", "mujoco", "tyro", "tqdm", "sklearn")

# Run in a fresh interpreter: load THIRD_PARTY, then import each module in a forked child (a fresh copy with
# none of ours loaded), and report the modules whose import fails with the last line of their error.
_DRIVER = """
import importlib, os, sys, traceback
for name in sys.argv[2].split(","):
    importlib.import_module(name)
assert not [m for m in sys.modules if m.startswith("platonic_rl")], "one of ours was loaded before the forks"
for module in sys.argv[1].split(","):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            code = 0
        except BaseException as error:
            os.write(write, (traceback.format_exception_only(type(error), error)[-1]).encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read().strip()
    _, status = os.waitpid(pid, 0)
    if status:
        print(f"import failure: {module}: {message or f'exit status {status}'}")
"""


def _import_each_alone(modules: list[str], cwd: Path, preload: tuple[str, ...] = THIRD_PARTY) -> str:
    # Run outside the repository, so that only the installed package can be found.
    result = subprocess.run([sys.executable, "-c", _DRIVER, ",".join(modules), ",".join(preload)], cwd=cwd,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"the import driver failed: {result.stderr[-2000:]}"
    # Only the driver's own lines are failures: third-party imports may print too (mujoco's MJX prints "Failed to
    # import warp" when its optional warp backend is missing, as importing Brax does).
    marker = "import failure: "
    return "\n".join(line[len(marker):] for line in result.stdout.splitlines() if line.startswith(marker))


def test_module_list_is_complete():
    modules = suite_modules()
    assert {"platonic_rl.denoised.model", "platonic_rl.agents.qrl", "platonic_rl.benchmarks.mountaincar"} <= set(modules)
    assert len(modules) == len(set(modules))
    # Every folder of Python code at the top level is an installed package (nothing left out of the wheel).
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert folders == {m.split(".")[1] for m in modules if m.count(".") == 1}


def test_every_module_imports_alone_in_a_fresh_interpreter(tmp_path):
    failures = _import_each_alone(suite_modules(), tmp_path)
    if failures:
        pytest.fail("modules that fail to import alone:\n" + failures)


def test_an_import_cycle_is_caught(tmp_path):
    # Two modules that import each other's names: each fails when it is the first to be imported.
    (tmp_path / "cycle_a.py").write_text("from cycle_b import B\nA = 1\n")
    (tmp_path / "cycle_b.py").write_text("from cycle_a import A\nB = 2\n")
    (tmp_path / "fine.py").write_text("import json\n")
    failures = _import_each_alone(["cycle_a", "fine", "cycle_b"], tmp_path, preload=("json",)).splitlines()
    assert [line.split(":")[0] for line in failures] == ["cycle_a", "cycle_b"]
    assert all("ImportError" in line for line in failures)
