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


def _damage(folder, how: str) -> None:
    """A checkpoint folder emptied (every file 0 bytes), truncated (every data file cut to half) or without its
    manifests."""
    for f in sorted(folder.rglob("*")):
        if not f.is_file():
            continue
        if how == "emptied":
            f.write_bytes(b"")
        elif how == "truncated" and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:len(f.read_bytes()) // 2])
        elif how == "manifest deleted" and f.name == "manifest.ocdbt":
            f.unlink()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # orbax's reader threads, on damage
@pytest.mark.parametrize("how", ["emptied", "truncated", "manifest deleted"])
def test_a_damaged_checkpoint_is_moved_aside_and_the_run_resumes_from_the_previous_one_exactly(tmp_path, how):
    full, full_rows = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=60),
                                    tmp_path / "full")
    cut = tmp_path / "cut"
    train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, cut)  # rows 10-40, checkpoints 20 and 40
    _damage(cut / "checkpoints" / "40", how)
    with pytest.warns(UserWarning) as warned:
        resumed, rows = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=60), cut)
    messages = " | ".join(str(w.message) for w in warned)
    assert f"checkpoint {cut / 'checkpoints' / '40'} cannot be restored" in messages, messages
    assert f"moved to {cut / 'damaged_checkpoints' / '40'} and resuming from the checkpoint at step 20" in messages
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    strip = lambda rs: [{k: v for k, v in r.items() if k not in ("wall_time", "row_seconds")} for r in rs]  # noqa
    assert strip(rows) == strip(full_rows)
    assert (cut / "damaged_checkpoints" / "40").is_dir()  # kept, never deleted
    aside = [json.loads(x)["step"] for x in (cut / "metrics.dropped.jsonl").read_text().splitlines()]
    assert aside == [30, 40]  # the rows logged after step 20, kept


def test_a_run_whose_every_checkpoint_is_damaged_is_refused_with_one_short_message_moving_nothing(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    for step in ("20", "40"):
        _damage(tmp_path / "checkpoints" / step, "emptied")
    with pytest.raises(RunDirectoryError) as error:
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=60), tmp_path)
    message = str(error.value)
    assert str(tmp_path / "checkpoints" / "40") in message and "nor do the earlier ones (steps 20)" in message
    assert "start the run again from step 0" in message
    assert len(message) < 700 and error.value.__cause__ is None
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["20", "40"]
    assert not (tmp_path / "damaged_checkpoints").exists()


def test_a_checkpoint_left_half_written_is_removed_saying_so(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    partial = tmp_path / "checkpoints" / "40.orbax-checkpoint-tmp-1234"
    partial.mkdir()
    (partial / "x").write_bytes(b"half")
    with pytest.warns(UserWarning, match="40.orbax-checkpoint-tmp-1234, a checkpoint whose writing was interrupted"):
        _, rows = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    assert not partial.exists() and [r["step"] for r in rows] == [10, 20, 30, 40]


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


def _no_space(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_at_a_checkpoint_stops_with_one_line_naming_the_step_cause_and_newest_checkpoint(
        tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    real_save = ocp.CheckpointManager.save

    def save_fails_half_written(self, step, *args, **kwargs):
        (tmp_path / "checkpoints" / f"{step}.orbax-checkpoint-tmp-99").mkdir()  # what a failed write leaves
        raise ValueError("RESOURCE_EXHAUSTED: Failed to write 4096 bytes: No space left on device "
                         "[os_error_code='28']")

    monkeypatch.setattr(ocp.CheckpointManager, "save", save_fails_half_written)
    with pytest.raises(OSError) as error:
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    message = str(error.value)
    assert message == (f"{tmp_path}: could not write the checkpoint at step 40: No space left on device (ENOSPC). "
                       f"The newest complete checkpoint is step 20 ({tmp_path / 'checkpoints' / '20'}); free space "
                       "(or move the run directory) and run the same command again to resume from it")
    assert isinstance(error.value, RunDirectoryError) and error.value.__cause__ is None
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["20"]  # no half-written folder left
    monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
    with pytest.warns(UserWarning, match="rows logged after step 20"):  # room again: it resumes
        _, rows = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    assert [r["step"] for r in rows] == [10, 20, 30, 40]


def test_a_full_disk_at_a_metrics_row_stops_naming_the_row_and_the_cause(tmp_path, monkeypatch):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    monkeypatch.setattr(MetricsLog, "append", _no_space)
    with pytest.raises(RunDirectoryError, match=r"could not write the metrics row at step 30: No space left on device "
                                                r"\(OSError, errno 28\)\. The newest complete checkpoint is step 20"):
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)


def test_a_checkpoint_the_disk_has_no_room_for_is_refused_before_orbax_starts_writing(tmp_path, monkeypatch):
    import shutil

    import orbax.checkpoint as ocp

    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    usage, started = shutil.disk_usage(tmp_path), []
    size = sum(x.nbytes for x in jax.tree.leaves(QRLAgent.create(TINY, 0)))  # the agent: most of the state's bytes
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=size // 2))  # room once at the start...
    monkeypatch.setattr(ocp.CheckpointManager, "save", lambda *a, **k: started.append(1))
    monkeypatch.setattr(RunDirectory, "_check_free_space", lambda self, state: None)  # ...not two checkpoints' worth
    with pytest.raises(RunDirectoryError, match=rf"could not write the checkpoint at step 40: No space left on device "
                                                rf"\(ENOSPC\): {size // 2 / 1e6:,.1f} MB free, the checkpoint needs up "
                                                r"to \d+\.\d MB\. The newest complete checkpoint is step 20"):
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)
    assert not started  # orbax never began a write it could not finish


def test_a_disk_without_room_for_two_checkpoints_is_refused_before_training(tmp_path, monkeypatch):
    import shutil

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    with pytest.raises(RunDirectoryError, match=r"0\.0 MB free on its filesystem, less than two checkpoints of "
                                                r"0\.\d MB each"):
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


@pytest.mark.slow
def test_a_real_full_filesystem_stops_the_run_briefly_and_the_copied_run_resumes_exactly(tmp_path):
    """A 2 MB tmpfs (where this machine lets the test mount one): GCBC offline fills it at its third checkpoint."""
    import shutil
    import subprocess
    import sys

    from test_loop import GCBC_OFFLINE

    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs is not permitted here")
    try:
        script = GCBC_OFFLINE.replace("hidden=(64, 64)", "hidden=(256, 256)")
        run = lambda d: subprocess.run([sys.executable, "-c", script, str(d)], capture_output=True,  # noqa: E731
                                       text=True, timeout=600)
        stopped = run(small / "run")
        assert stopped.returncode == 1
        last = stopped.stderr.strip().splitlines()[-1]
        assert "could not write the checkpoint at step 3000: No space left on device" in last, stopped.stderr
        assert "newest complete checkpoint is step 2000" in last
        assert len(stopped.stderr.strip().splitlines()) < 20, stopped.stderr  # a traceback, no background noise
        assert sorted(p.name for p in (small / "run" / "checkpoints").iterdir()) == ["1000", "2000"]
        shutil.copytree(small / "run", tmp_path / "moved", ignore=shutil.ignore_patterns(".run.lock", ".run.holder"))
    finally:
        subprocess.run(["umount", str(small)])
    assert run(tmp_path / "moved").returncode == 0
    assert run(tmp_path / "whole").returncode == 0
    read = lambda d: [{k: v for k, v in json.loads(x).items() if k not in ("row_seconds", "wall_time")}  # noqa
                      for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert read(tmp_path / "moved") == read(tmp_path / "whole")
