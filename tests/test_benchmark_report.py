"""benchmarks/report.py: the command string, results.json, the plots and what is printed."""
import dataclasses
import json
import shlex

import numpy as np
import pytest

from platonic_rl.benchmarks import report


@dataclasses.dataclass(frozen=True)
class Args:
    out_dir: str = "results/x"
    seeds: tuple[int, ...] = (0, 1)


def test_command_quotes_arguments_and_defaults_to_this_process(monkeypatch):
    cmd = report.command("platonic_rl.benchmarks.fetch", ["--out-dir", "my runs/a b", "--seeds", "0", "1", "x'y"])
    assert cmd.startswith("python -m platonic_rl.benchmarks.fetch --out-dir ")
    assert shlex.split(cmd) == ["python", "-m", "platonic_rl.benchmarks.fetch", "--out-dir", "my runs/a b",
                                "--seeds", "0", "1", "x'y"]
    monkeypatch.setattr("sys.argv", ["/usr/lib/python3/platonic_rl/benchmarks/fetch.py", "--env", "push"])
    assert report.command("platonic_rl.benchmarks.fetch") == "python -m platonic_rl.benchmarks.fetch --env push"


def test_save_run_writes_results_plots_and_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["prog", "--out-dir", str(tmp_path / "run 1")])
    drawn = []

    def draw(path):
        drawn.append(path)
        path.write_bytes(b"png")

    record = dict(results={"a": np.float32(0.5), "curve": np.arange(3)}, gamma=0.9)
    saved = report.save_run(tmp_path / "run 1", "platonic_rl.benchmarks.x", Args(), record, "the table",
                            plots={"one.png": draw, "two.png": draw}, total_seconds=12.5)
    out = tmp_path / "run 1"
    assert drawn == [out / "one.png", out / "two.png"] and (out / "two.png").read_bytes() == b"png"
    on_disk = json.loads((out / "results.json").read_text())
    assert shlex.split(on_disk["command"]) == ["python", "-m", "platonic_rl.benchmarks.x", "--out-dir", str(out)]
    assert on_disk["args"] == {"out_dir": "results/x", "seeds": [0, 1]}
    assert on_disk["table"] == "the table" and on_disk["total_seconds"] == 12.5 and on_disk["gamma"] == 0.9
    assert on_disk["results"] == {"a": 0.5, "curve": [0, 1, 2]}  # NumPy values as plain numbers and lists
    assert on_disk["jax_backend"] and on_disk["jax_devices"] and isinstance(on_disk["jax_devices"][0], str)
    assert on_disk["commit"] == report.source_commit()
    assert saved.keys() == on_disk.keys() and saved["command"] == on_disk["command"]
    assert "results" in record and "command" not in record  # the caller's record is not changed
    printed = capsys.readouterr().out
    assert printed.startswith("the table\n")
    assert f"saved {out / 'results.json'}, {out / 'one.png'}, {out / 'two.png'}" in printed

    # Without plots or seconds: just results.json, and no total_seconds key.
    saved = report.save_run(tmp_path / "bare", "platonic_rl.benchmarks.x", Args(), {}, "t")
    assert "total_seconds" not in saved and sorted(p.name for p in (tmp_path / "bare").iterdir()) == ["results.json"]
    with pytest.raises(ValueError, match="must not hold"):
        report.save_run(tmp_path, "platonic_rl.benchmarks.x", Args(), dict(table="mine"), "t")


def test_resave_run_keeps_the_runs_command_args_and_seconds(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["prog", "--first"])
    report.save_run(tmp_path, "platonic_rl.benchmarks.x", Args(), dict(summary={"a": 1}), "old table",
                    total_seconds=3.0)
    first = json.loads((tmp_path / "results.json").read_text())
    monkeypatch.setattr("sys.argv", ["prog", "--add-reference-to", str(tmp_path)])
    record = json.loads((tmp_path / "results.json").read_text())
    record["summary"]["reference"] = 0.1
    report.resave_run(tmp_path, "platonic_rl.benchmarks.x", record, "new table",
                      plots={"p.png": lambda path: path.write_text("x")})
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["command"] == first["command"] and again["args"] == first["args"]
    assert again["total_seconds"] == 3.0 and again["jax_devices"] == first["jax_devices"]
    assert again["reference_command"].endswith(f"--add-reference-to {tmp_path}") and again["table"] == "new table"
    assert again["summary"] == {"a": 1, "reference": 0.1} and (tmp_path / "p.png").is_file()
    with pytest.raises(ValueError, match="overwrite"):
        report.resave_run(tmp_path, "platonic_rl.benchmarks.x", record, "t", command_key="command")


def test_source_commit_names_the_checkout_and_says_when_it_was_modified(tmp_path, monkeypatch):
    import subprocess

    root = tmp_path / "suite"
    (root / "benchmarks").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "a.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(report, "__file__", str(root / "benchmarks" / "report.py"))
    (root / "untracked.json").write_text("{}")  # a benchmark's own output is no modification
    assert report.source_commit() == head
    (root / "a.txt").write_text("b")
    assert report.source_commit() == head + "+modified"
    monkeypatch.setattr(report, "__file__", str(tmp_path / "elsewhere" / "benchmarks" / "report.py"))
    (tmp_path / "elsewhere").mkdir()
    assert report.source_commit() is None
    (root / "inner" / "benchmarks").mkdir(parents=True)  # a copy inside another repository: not its commit
    monkeypatch.setattr(report, "__file__", str(root / "inner" / "benchmarks" / "report.py"))
    assert report.source_commit() is None


def test_cached_record_reuses_a_current_record_and_remakes_one_of_other_settings(tmp_path):
    path, calls = tmp_path / "evals" / "row.json", []

    def compute(value):
        calls.append(value)
        return dict(updates=value, score=np.float32(0.5) * value)  # a NumPy value is saved as a number

    first = report.cached_record(path, lambda: compute(10))
    assert first == dict(updates=10, score=5.0) and json.loads(path.read_text()) == first
    current = lambda record: record["updates"] == 10  # noqa: E731
    assert report.cached_record(path, lambda: compute(99), current=current) == first and calls == [10]
    again = report.cached_record(path, lambda: compute(20), current=lambda record: record["updates"] == 20)
    assert again["updates"] == 20 and report.read_record(path) == again and calls == [10, 20]
    report.cached_record(path, lambda: compute(20), current=lambda record: True, overwrite=True)
    assert calls == [10, 20, 20]
    assert report.read_record(tmp_path / "missing.json") is None


def test_finished_run_reuses_its_record_refuses_other_settings_and_retrains_only_on_overwrite(tmp_path):
    path, calls = tmp_path / "runs" / "maze-qrl" / "record.json", []

    def train(value):
        calls.append(value)
        return dict(success=[value])

    settings = dict(agent=dict(width=64), loop=dict(steps=100, log_every=10))
    first = report.finished_run(path, settings, lambda: train(0.5))
    assert first == dict(success=[0.5], settings=settings) and report.read_record(path) == first
    assert report.finished_run(path, settings, lambda: train(0.9)) == first and calls == [0.5]
    # a host-only field named in ``ignore`` may differ; any other field is refused, named with both values
    host = dict(settings, loop=dict(steps=100, log_every=50))
    assert report.finished_run(path, host, lambda: train(0.9), ignore=("loop.log_every",)) == first
    with pytest.raises(ValueError, match=r"(?s)other settings.*agent\.width.*64.*128.*--overwrite"):
        report.finished_run(path, dict(settings, agent=dict(width=128)), lambda: train(0.9))
    with pytest.raises(ValueError, match=r"(?s)check_episodes.*--runs-dir"):
        report.finished_run(path, settings, lambda: train(0.9), elsewhere="--runs-dir",
                            checked=lambda record: dict(check_episodes=(None, 20)))
    assert calls == [0.5] and report.read_record(path) == first  # nothing trained, nothing lost
    wider = dict(settings, agent=dict(width=128))
    assert report.finished_run(path, wider, lambda: train(0.9), overwrite=True) == dict(success=[0.9], settings=wider)
    assert calls == [0.5, 0.9]
