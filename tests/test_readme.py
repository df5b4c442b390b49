"""The README's code runs: every ```python block is executed as written, and every command it shows
(``python3 -m <module> ...`` in ```bash blocks and in inline code) parses with that module's own CLI."""
from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", TEXT, flags=re.S | re.M)


def readme_commands() -> list[list[str]]:
    """argv of every ``python3 -m`` / ``python -m`` command: whole lines of bash blocks (split at ``&&``,
    comments dropped) and inline code spans; spans that are usage synopses (``[--flag ...]``) are skipped."""
    lines = [line.split("#")[0] for block in code_blocks("bash") for line in block.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    parts += [span for span in re.findall(r"`(python3? -m [^`]+)`", TEXT) if "[" not in span and "..." not in span]
    return [shlex.split(part) for part in parts if re.match(r"python3? -m ", part)]


PYTHON_BLOCKS = code_blocks("python")
COMMANDS = [argv for argv in readme_commands() if argv[2] not in ("pip", "pytest")]


def test_the_readme_has_the_blocks_and_commands_we_expect():
    assert len(PYTHON_BLOCKS) >= 4
    modules = {argv[2] for argv in COMMANDS}
    assert {"platonic_rl.training.offline", "platonic_rl.benchmarks.mountaincar", "platonic_rl.benchmarks.fetch",
            "platonic_rl.benchmarks.dmc"} <= modules
    # The two set-up commands are there as written.
    assert "python3 -m pip install -e . && python3 -m platonic_rl.benchmarks.mountaincar" in TEXT
    assert 'python3 -m pip install -e ".[test]" && python3 -m pytest' in TEXT


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)),
                         ids=[re.sub(r"\W+", "_", b.split("\n")[1] if "\n" in b else b)[:40] for b in PYTHON_BLOCKS])
def test_python_block_runs_as_written(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    monkeypatch.setenv("PLATONIC_RL_DATA", str(tmp_path))  # and generated datasets too
    exec(compile(PYTHON_BLOCKS[index], f"README.md python block {index}", "exec"), {"__name__": "readme"})


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[2:])[:60] for a in COMMANDS])
def test_command_parses(argv):
    module = importlib.import_module(argv[2])
    rest = argv[3:]
    if hasattr(module, "parse_args"):
        module.parse_args(rest)
    else:
        import tyro

        tyro.cli(module.Args, args=rest)
