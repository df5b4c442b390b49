"""The run directory every loop writes: rows agree across JSONL/CSV/TensorBoard, misuse is refused, damage is
reported briefly, a NaN stops the run at its step, and a killed run still resumes exactly."""
import csv
import dataclasses
import json
import re
import struct

import jax
import numpy as np
import pytest

from platonic_rl.agents.qrl import QRLAgent
from platonic_rl.training.offline import train_offline
from platonic_rl.training.run import LOCK_FILES, RUN_FORMAT, MetricsLog, RunDirectory, RunDirectoryError
from platonic_rl.training.updates import NonFiniteError, check_finite

from test_train import CONFIG, TINY, data  # noqa: E402  (the offline loop's tiny agent, config and dataset)


def tensorboard_scalars(directory) -> dict[str, dict[int, float]]:
    """Scalars of every event file below ``directory`` (TFRecord framing: length, crc, Event proto, crc)."""
    from tensorboardX.proto import event_pb2

    out = {}
    for path in sorted(directory.rglob("events.out.tfevents.*")):
        raw = path.read_bytes()
        offset = 0
        while offset < len(raw):
            (length,) = struct.unpack("<Q", raw[offset:offset + 8])
            event = event_pb2.Event.FromString(raw[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                out.setdefault(value.tag, {})[event.step] = value.simple_value
    return out


def test_rows_agree_across_jsonl_csv_and_tensorboard_and_csv_grows_with_the_log(tmp_path):
    run = RunDirectory.open(tmp_path / "run", dict(lr=0.1), tensorboard=True)
    run.open_metrics(0)
    for step in (1, 2, 3):
        row = {"step": step, "loss": 1.0 / step}
        if step == 2:
            row["eval"] = 0.5  # a column that appears later
        run.log(row)
        assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == step + 1  # header + rows
    run.close()
    rows = MetricsLog.read(tmp_path / "run")
    with (tmp_path / "run" / "metrics.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [r["loss"] for r in rows] == pytest.approx([1.0, 0.5, 1 / 3])
    assert [float(r["loss"]) for r in table] == pytest.approx([r["loss"] for r in rows])
    assert [r["eval"] for r in table] == ["", "0.5", ""]
    board = tensorboard_scalars(tmp_path / "run" / "tensorboard")
    assert board["loss"] == pytest.approx({1: 1.0, 2: 0.5, 3: 1 / 3})
    assert set(board["row_seconds"]) == {1, 2, 3}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["settings"] == {"lr": 0.1}


def test_config_keeps_the_command_that_started_the_run_and_lists_those_that_continued_it(tmp_path, monkeypatch):
    commands = (["train.py", "--steps", "10"], ["train.py", "--steps", "20"], ["train.py", "--steps", "30"])
    for steps, argv in zip((10, 20, 30), commands):
        monkeypatch.setattr("sys.argv", argv)
        RunDirectory.open(tmp_path, {"lr": 0.1, "steps": steps}, resumable=("steps",)).close()
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["command"] == "train.py --steps 10"
    assert saved["continued_by"] == ["train.py --steps 20", "train.py --steps 30"]
    assert saved["settings"] == {"lr": 0.1, "steps": 30}  # the latest budget
    monkeypatch.setattr("sys.argv", ["train.py", "--lr", "0.2"])
    with pytest.raises(RunDirectoryError, match="lr"):
        RunDirectory.open(tmp_path, {"lr": 0.2, "steps": 30}, resumable=("steps",))
    assert json.loads((tmp_path / "config.json").read_text()) == saved  # a refused command is not recorded


def test_other_settings_are_refused_listing_them_and_nothing_changes(tmp_path):
    RunDirectory.open(tmp_path, dict(agent=dict(lr=0.1, width=8), steps=10), resumable=("steps",)).close()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(RunDirectoryError, match=r"(?s)agent\.lr: saved 0\.1, now 0\.2.*agent\.width: saved 8, now 16"):
        RunDirectory.open(tmp_path, dict(agent=dict(lr=0.2, width=16), steps=10), resumable=("steps",))
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    RunDirectory.open(tmp_path, dict(agent=dict(lr=0.1, width=8), steps=20), resumable=("steps",)).close()  # budget


def test_a_fresh_run_into_a_used_directory_is_refused_unless_overwritten(tmp_path):
    run_dir = tmp_path / "run"
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), run_dir)
    with pytest.raises(RunDirectoryError, match="already holds a run; pass overwrite"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, resume=False), run_dir)
    (run_dir / "stray.txt").write_text("from the old run")
    _, history = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, resume=False, overwrite=True,
                                                                                     seed=5), run_dir)
    assert not (run_dir / "stray.txt").exists()  # cleared first
    assert [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [10, 20, 30, 40]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["20", "40"]
    assert json.loads((run_dir / "config.json").read_text())["settings"]["train_config"]["seed"] == 5


def test_an_overflowing_row_stops_the_run_at_its_step_and_keeps_the_last_good_checkpoint(tmp_path):
    poisoned = data()
    poisoned["observations"][123, 1] = 3e38  # finite (a NaN is refused before training), but overflows the encoder
    config = dataclasses.replace(CONFIG, steps=400, log_every=10, checkpoint_every=10)
    with pytest.raises(NonFiniteError, match=r"non-finite values at update (\d+): .*agent_state") as error:
        train_offline(QRLAgent.create(TINY, 0), poisoned, config, tmp_path)
    import re

    step = int(re.search(r"update (\d+)", str(error.value)).group(1))
    assert 1 <= step <= 400
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir())
    assert all(s < step for s in saved)  # nothing from the damaged state was saved
    # The reported step is the first update whose batch holds row 123: replay the sampler's draws.
    from platonic_rl.training.updates import chain_keys

    key, draws = jax.random.PRNGKey(config.seed), []
    key, keys = chain_keys(key, 400)
    for k in keys:
        draws.append(123 in np.asarray(jax.random.randint(k, (config.batch_size,), 0, 500)))
    assert step == draws.index(True) + 1


def test_check_finite_names_the_first_bad_update_and_quantities():
    finite = {"loss": np.array([True, True, False, False]), "agent_state": np.array([True, False, False, False])}
    with pytest.raises(NonFiniteError, match=r"update 11: agent_state \("):
        check_finite(finite, first_step=10)
    check_finite({"loss": np.ones(3, bool)}, first_step=1)


def test_a_corrupt_checkpoint_gives_one_short_message_and_deleting_it_resumes_exactly(tmp_path):
    full, _ = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path / "full")
    cut = tmp_path / "cut"
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=40, checkpoint_every=20), cut)
    for f in (cut / "checkpoints" / "40").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    with pytest.raises(RunDirectoryError) as error:
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, cut)
    message = str(error.value)
    assert str(cut / "checkpoints" / "40") in message and "previous checkpoint (step 20)" in message
    assert len(message) < 600 and error.value.__cause__ is None and error.value.__suppress_context__
    import shutil

    shutil.rmtree(cut / "checkpoints" / "40")
    resumed, history = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, cut)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert [r["step"] for r in history] == [10, 20, 30, 40]


def test_a_damaged_last_metrics_line_is_dropped_and_a_lost_log_is_reported(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text(jsonl.read_text() + '{"step": 30, "loss": 1.')  # killed mid-write
    with pytest.warns(UserWarning, match="damaged last line"):
        _, history = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    assert [r["step"] for r in history] == [10, 20, 30, 40]
    jsonl.write_text("")  # a log emptied by accident
    with pytest.warns(UserWarning, match="holds rows only up to step 0, not up to the checkpoint.s step 40"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=50), tmp_path)
    lines = jsonl.read_text().splitlines()
    with pytest.raises(RunDirectoryError, match="line 1 is damaged"):
        jsonl.write_text("{oops\n" + "\n".join(lines) + "\n")
        MetricsLog.read(tmp_path)


def test_missing_tensorboardx_gives_a_clear_message(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboardx(name, *args, **kwargs):
        if name.startswith("tensorboardX"):
            raise ImportError("no tensorboardX")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboardx)
    run = RunDirectory.open(tmp_path, {}, tensorboard=True)
    with pytest.raises(ImportError, match=r"platonic-rl\[tensorboard\]"):
        run.open_metrics(0)


def test_overwrite_clears_even_with_resume_on(tmp_path):
    RunDirectory.open(tmp_path, {"a": 1}).close()
    (tmp_path / "old.txt").write_text("x")
    RunDirectory.open(tmp_path, {"a": 2}, resume=True, overwrite=True).close()  # no settings clash: cleared first
    assert not (tmp_path / "old.txt").exists()


def test_overwrite_refuses_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "precious.txt").write_text("not a run")
    with pytest.raises(RunDirectoryError, match="not a run directory"):
        RunDirectory.open(tmp_path, {}, overwrite=True)
    assert (tmp_path / "precious.txt").exists()


def test_rows_lost_between_the_log_and_the_checkpoint_are_reported(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=40), tmp_path)
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text("".join(line + "\n" for line in jsonl.read_text().splitlines()[:2]))  # rows 10, 20 kept
    with pytest.warns(UserWarning, match="rows only up to step 20, not up to the checkpoint's step 40"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=50), tmp_path)


def test_restored_arrays_are_placed_as_the_templates_so_compiled_functions_serve_both(tmp_path):
    # A fresh agent's arrays sit at the default placement (uncommitted); one placed explicitly is committed. The
    # restored state keeps each leaf's placement, so a jitted function lowers to the same program for both.
    template = dict(params=jax.numpy.arange(6.0).reshape(2, 3), step=jax.numpy.int32(7),
                    placed=jax.device_put(jax.numpy.ones(4), jax.devices()[0]), key=jax.random.key(3))
    run = RunDirectory.open(tmp_path, dict(run=1))
    run.log({"step": 7})
    run.save(7, template)
    run.close()
    run = RunDirectory.open(tmp_path, dict(run=1))
    fresh = dict(jax.tree.map(jax.numpy.zeros_like, {k: v for k, v in template.items() if k != "key"}),
                 key=jax.random.key(0))
    restored = run.restore(fresh, budget=10)
    run.close()
    values = lambda tree: {k: jax.random.key_data(v) if k == "key" else v for k, v in tree.items()}  # noqa: E731
    for name in template:
        np.testing.assert_array_equal(values(restored)[name], values(template)[name])
    for name in ("params", "step", "placed"):  # (a typed key comes back as orbax places it; agents hold raw keys)
        assert restored[name].committed == template[name].committed, name
    assert not restored["params"].committed and restored["placed"].committed
    program = jax.jit(lambda s: s["params"].sum() * s["step"] + s["placed"].sum())
    without_key = lambda tree: {k: v for k, v in tree.items() if k != "key"}  # noqa: E731
    assert program.lower(without_key(restored)).as_text() == program.lower(without_key(template)).as_text()


def test_a_budget_below_the_checkpoint_is_refused(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=40), tmp_path)
    with pytest.raises(RunDirectoryError, match="already at step 40, beyond this run's budget of 20"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)


def test_a_field_added_after_the_run_started_may_stay_at_its_default(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Config:
        lr: float = 0.1
        width: int = 8
        compute_dtype: str = "float32"  # added to the library after the saved run started

    old_run = dict(agent_config=dict(lr=0.1, width=16), steps=10)  # as saved before the field existed
    RunDirectory.open(tmp_path, old_run).close()
    RunDirectory.open(tmp_path, dict(agent_config=Config(width=16), steps=10)).close()  # its default: continues
    with pytest.raises(RunDirectoryError, match=r"agent_config\.compute_dtype: saved None, now 'bfloat16'"):
        RunDirectory.open(tmp_path, dict(agent_config=Config(width=16, compute_dtype="bfloat16"), steps=10))
    with pytest.raises(RunDirectoryError, match=r"agent_config\.width: saved 16, now 8"):
        RunDirectory.open(tmp_path, dict(agent_config=Config(), steps=10))  # a saved field at another value


def test_a_directory_of_an_earlier_format_is_refused_untouched_and_overwrite_clears_it(tmp_path):
    RunDirectory.open(tmp_path, dict(lr=0.1)).close()
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["format"] == RUN_FORMAT
    del config["format"]  # as written before the format was recorded
    (tmp_path / "config.json").write_text(json.dumps(config))
    contents = lambda: sorted(p.name for p in tmp_path.iterdir() if p.name not in LOCK_FILES)  # noqa: E731
    before = contents()
    with pytest.raises(RunDirectoryError, match=f"holds a run of format 1, .* reads format {RUN_FORMAT}"):
        RunDirectory.open(tmp_path, dict(lr=0.1))
    assert contents() == before
    assert "format" not in json.loads((tmp_path / "config.json").read_text())
    RunDirectory.open(tmp_path, dict(lr=0.1), overwrite=True).close()
    RunDirectory.open(tmp_path, dict(lr=0.1)).close()  # today's format: resumes


HOLD = """
import sys, time
from platonic_rl.training.run import RunDirectory
run = RunDirectory.open(sys.argv[1], dict(lr=0.1))
print("holding", flush=True)
time.sleep(120)
"""


def hold_in_another_process(path):
    """A second process that opens ``path`` as a run directory and keeps it open; returns it once it holds it."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_second_writer_is_refused_naming_the_holders_process_id(tmp_path):
    from platonic_rl.training.run import RunDirectoryInUseError

    holder = hold_in_another_process(tmp_path / "run")
    try:
        with pytest.raises(RunDirectoryInUseError, match=rf"{re.escape(str(tmp_path / 'run'))} is in use by process "
                                                         rf"{holder.pid} on "):
            RunDirectory.open(tmp_path / "run", dict(lr=0.1))
        with pytest.raises(RunDirectoryInUseError, match=f"process {holder.pid}"):  # overwriting is writing too
            RunDirectory.open(tmp_path / "run", dict(lr=0.1), overwrite=True)
        assert (tmp_path / "run" / "config.json").exists()  # the holder's run was not touched
    finally:
        holder.terminate()
        holder.wait()
    # In one process too: a directory open in one RunDirectory is refused to a second until the first is closed.
    first = RunDirectory.open(tmp_path / "mine", dict(lr=0.1))
    with pytest.raises(RunDirectoryInUseError, match=f"process {__import__('os').getpid()}"):
        RunDirectory.open(tmp_path / "mine", dict(lr=0.1))
    first.close()
    first.close()  # closing twice is harmless
    with RunDirectory.open(tmp_path / "mine", dict(lr=0.1)) as again:
        assert again.path == tmp_path / "mine"
    RunDirectory.open(tmp_path / "mine", dict(lr=0.1)).close()  # the context manager released it


def test_a_killed_holder_does_not_block_the_next_run(tmp_path):
    import signal

    holder = hold_in_another_process(tmp_path / "run")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / "run" / ".run.holder").exists()  # it had no chance to clean up
    run = RunDirectory.open(tmp_path / "run", dict(lr=0.1))  # resumes its (empty) run
    assert json.loads((tmp_path / "run" / ".run.holder").read_text())["pid"] == __import__("os").getpid()
    run.close()
    assert not (tmp_path / "run" / ".run.holder").exists()


def test_a_loop_that_fails_releases_its_directory(tmp_path, monkeypatch):
    # A refused resume, and a run stopped by an error, leave the directory free for the next attempt.
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), run_dir=tmp_path / "r")
    with pytest.raises(RunDirectoryError, match="other settings"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20, batch_size=8),
                      run_dir=tmp_path / "r")
    with pytest.raises(RunDirectoryError, match="beyond this run's budget"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=10), run_dir=tmp_path / "r")
    # An error inside the loop (here the NaN check of the first call) leaves the directory free too.
    import platonic_rl.training.offline as offline

    def nan(finite, first_step, unit="update"):
        raise NonFiniteError(f"NaN at {unit} {first_step}")

    monkeypatch.setattr(offline, "check_finite", nan)
    with pytest.raises(NonFiniteError, match="NaN at update 21"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=40), run_dir=tmp_path / "r")
    RunDirectory.open(tmp_path / "r", {}, overwrite=True).close()
