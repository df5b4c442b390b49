"""Every committed result still states how to reproduce it: its recorded command, parsed by today's benchmark,
gives the settings the record ran with. A changed default shows here as a record whose command no longer says what
it ran, and the record's own settings name the field."""
import dataclasses
import importlib
import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "docs" / "results").rglob("results.json"))


def recorded_command(record: dict) -> tuple[str, list[str]]:
    """The benchmark module and its arguments (records made before the package moved say ``benchmarks.x``)."""
    argv = shlex.split(record["command"])
    assert argv[:2] == ["python", "-m"] or argv[:2] == ["python3", "-m"], record["command"]
    module = argv[2] if argv[2].startswith("platonic_rl.") else "platonic_rl." + argv[2]
    return module, argv[3:]


def settings_differing(record: dict) -> dict:
    """{field: (recorded, what the recorded command gives today)} over the fields the record holds."""
    import tyro

    from platonic_rl.benchmarks import report

    module, arguments = recorded_command(record)
    args = tyro.cli(importlib.import_module(module).Args, args=arguments)
    today = json.loads(json.dumps(dataclasses.asdict(args), default=report.plain))
    # A group of flags without a prefix (the DMC benchmark's methods' settings) is recorded flat by earlier records.
    today.update({k: v for group in list(today.values()) if isinstance(group, dict) for k, v in group.items()})
    return {k: (v, today[k]) for k, v in record["args"].items() if k in today and today[k] != v}


def test_there_are_records_to_check():
    assert len(RECORDS) > 20


@pytest.mark.parametrize("path", RECORDS, ids=[str(p.parent.relative_to(ROOT / "docs" / "results")) for p in RECORDS])
def test_a_recorded_command_still_gives_the_recorded_settings(path):
    record = json.loads(path.read_text())
    differing = settings_differing(record)
    assert not differing, (f"{path.relative_to(ROOT)}: its command now gives other settings than it ran with "
                           f"(recorded, today): {differing}; a default changed -- restore it, or record the setting "
                           "in the docs' command for this table")


def test_the_check_sees_a_changed_default(monkeypatch):
    path = ROOT / "docs" / "results" / "mountaincar_cpu" / "results.json"
    record = json.loads(path.read_text())
    assert settings_differing(record) == {}
    from platonic_rl.benchmarks import mountaincar

    changed = dataclasses.make_dataclass("Args", [("seed", int, dataclasses.field(default=7))],
                                         bases=(mountaincar.Args,), frozen=True)
    monkeypatch.setattr(mountaincar, "Args", changed)
    assert settings_differing(record) == {"seed": (0, 7)}
