"""Every module of the suite imports on its own, in a fresh interpreter.

An import cycle only shows when a module is the first of ours to be imported (``import denoised.model``
used to fail unless ``agents`` had been imported before it), so each module gets its own interpreter.
"""
from __future__ import annotations

import concurrent.futures
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


def _import_alone(module: str, cwd: Path) -> tuple[str, int, str]:
    # Run outside the repository, so that only the installed package can be found.
    result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=cwd, capture_output=True,
                            text=True, timeout=300)
    return module, result.returncode, result.stderr.strip().splitlines()[-1:] if result.returncode else ""


def test_module_list_is_complete():
    modules = suite_modules()
    assert {"platonic_rl.denoised.model", "platonic_rl.agents.qrl", "platonic_rl.benchmarks.mountaincar"} <= set(modules)
    assert len(modules) == len(set(modules))
    # Every folder of Python code at the top level is an installed package (nothing left out of the wheel).
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert folders == {m.split(".")[1] for m in modules if m.count(".") == 1}


def test_every_module_imports_alone_in_a_fresh_interpreter(tmp_path):
    modules = suite_modules()
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        results = pool.map(lambda m: _import_alone(m, tmp_path), modules)
        failures = [(m, err) for m, code, err in results if code]
    if failures:
        pytest.fail("modules that fail to import alone:\n" + "\n".join(f"  {m}: {err}" for m, err in failures))
