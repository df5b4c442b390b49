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
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    modules = []
    for package in packages:
        folder = ROOT / package.replace(".", "/")
        modules.append(package)
        modules += [f"{package}.{path.stem}" for path in sorted(folder.glob("*.py")) if path.stem != "__init__"]
    return modules


def _import_alone(module: str) -> tuple[str, int, str]:
    result = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    return module, result.returncode, result.stderr.strip().splitlines()[-1:] if result.returncode else ""


def test_module_list_is_complete():
    modules = suite_modules()
    assert "denoised.model" in modules and "agents.qrl" in modules and "benchmarks.mountaincar" in modules
    assert len(modules) == len(set(modules))


def test_every_module_imports_alone_in_a_fresh_interpreter():
    modules = suite_modules()
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        failures = [(m, err) for m, code, err in pool.map(_import_alone, modules) if code]
    if failures:
        pytest.fail("modules that fail to import alone:\n" + "\n".join(f"  {m}: {err}" for m, err in failures))
