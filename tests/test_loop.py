"""training/loop.py: the driver every training loop runs on."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.training import loop as L
from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import RunDirectory


def count_to(run_dir, steps, settings=None, fail_at=None, signal_at=None, save_every=10):
    """A loop of its own on the driver: state x grows by 1 per row of 10 steps, checkpointed every ``save_every``
    steps; at step ``signal_at`` the process sends itself a SIGTERM before the row is finished."""
    with LoopRun.start(dict(x=jnp.zeros(2)), budget=steps, run_dir=run_dir, progress=False,
                       settings=settings if settings is not None else dict(lr=0.1, steps=steps),
                       resumable=("steps",)) as loop:
        state, step = loop.state, loop.start_step
        while step < steps:
            if step == fail_at:
                raise RuntimeError("stopped")
            state, step = dict(x=state["x"] + 1), step + 10
            if step == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            loop.finish_row({"step": step, "x": float(state["x"][0])}, step, state, due=step % save_every == 0)
    return state, loop.history


def test_without_a_run_directory_rows_are_kept_in_the_history_only(tmp_path):
    state, history = count_to(None, 30)
    assert [row["x"] for row in history] == [1.0, 2.0, 3.0] and float(state["x"][0]) == 3.0
    assert list(tmp_path.iterdir()) == []


def test_a_resumed_run_starts_from_its_checkpoint_with_its_rows_and_equals_an_uninterrupted_one(tmp_path):
    with pytest.raises(RuntimeError, match="stopped"):
        count_to(tmp_path / "a", 50, fail_at=30)  # three rows and checkpoints, then an error
    assert RunDirectory.saved_step(tmp_path / "a") == 30
    resumed, rows = count_to(tmp_path / "a", 50)  # the lock was released; the run continues from step 30
    whole, whole_rows = count_to(tmp_path / "b", 50)
    np.testing.assert_array_equal(resumed["x"], whole["x"])
    assert [(r["step"], r["x"]) for r in rows] == [(r["step"], r["x"]) for r in whole_rows]
    assert count_to(tmp_path / "a", 50)[1][-1]["step"] == 50  # at its budget: nothing trains, the rows stay


def test_a_run_directory_needs_the_runs_settings_and_refuses_others(tmp_path):
    with pytest.raises(ValueError, match="needs the run's settings"):
        with LoopRun.start(dict(x=jnp.zeros(2)), budget=10, run_dir=tmp_path / "c"):
            pass
    count_to(tmp_path / "d", 20)
    with pytest.raises(ValueError, match="other settings"):
        count_to(tmp_path / "d", 20, settings=dict(lr=0.2, steps=20))


def test_a_sigterm_saves_at_the_rows_step_stops_with_status_75_and_the_resumed_run_equals_an_uninterrupted_one(
        tmp_path, capsys):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(L.Preempted) as stopped:
        count_to(tmp_path / "a", 60, signal_at=30, save_every=40)  # checkpoints due at 40 only: none before the stop
    assert stopped.value.code == L.PREEMPTED_EXIT_CODE == 75 and stopped.value.step == 30
    assert RunDirectory.saved_step(tmp_path / "a") == 30
    err = capsys.readouterr().err
    assert "SIGTERM received: stopped at step 30 with its checkpoint saved" in err and "resume" in err
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are the caller's again
    resumed, rows = count_to(tmp_path / "a", 60, save_every=40)  # the lock was released
    whole, whole_rows = count_to(tmp_path / "b", 60, save_every=40)
    np.testing.assert_array_equal(resumed["x"], whole["x"])
    assert [(r["step"], r["x"]) for r in rows] == [(r["step"], r["x"]) for r in whole_rows]


def test_without_a_run_directory_signals_are_left_alone(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    with LoopRun.start(dict(x=jnp.zeros(2)), budget=10, progress=False):
        assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_goes_to_the_previous_handler_at_once():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        stop = L._StopSignals()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == signal.SIGTERM and seen == []      # the first is noted
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]                            # the second reaches the caller's handler
        assert signal.getsignal(signal.SIGTERM) is not stop._note
    finally:
        signal.signal(signal.SIGTERM, previous)


SLOW_COUNT = textwrap.dedent("""
    import sys, time
    import jax.numpy as jnp
    from platonic_rl.training.loop import LoopRun
    with LoopRun.start(dict(x=jnp.zeros(2)), budget=200, run_dir=sys.argv[1], progress=False,
                       settings=dict(steps=200)) as loop:
        state, step = loop.state, loop.start_step
        while step < 200:
            time.sleep(float(sys.argv[2]))
            state, step = dict(x=state["x"] + 1), step + 10
            loop.finish_row({"step": step, "x": float(state["x"][0])}, step, state, due=step % 100 == 0)
""")


def test_a_process_sent_sigterm_mid_run_exits_75_with_one_line_and_resumes_exactly(tmp_path):
    """The real thing: another process sends SIGTERM while the run sleeps between rows."""
    run = lambda d, pause: subprocess.Popen([sys.executable, "-c", SLOW_COUNT, str(d), str(pause)],  # noqa: E731
                                            stderr=subprocess.PIPE, text=True)
    proc = run(tmp_path / "a", 0.2)
    metrics = tmp_path / "a" / "metrics.jsonl"
    deadline = time.time() + 120
    while (not metrics.is_file() or len(metrics.read_text().splitlines()) < 3) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("SIGTERM received: stopped at step ") and "resume" in last, err
    step = RunDirectory.saved_step(tmp_path / "a")
    assert 30 <= step < 200 and f"step {step}" in last
    both = [run(tmp_path / "a", 0.0), run(tmp_path / "b", 0.0)]  # resumed; uninterrupted (side by side)
    assert [p.wait(timeout=120) for p in both] == [0, 0]
    rows = [line for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    whole = [line for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    strip = lambda lines: [{k: v for k, v in json.loads(x).items() if k != "row_seconds"} for x in lines]  # noqa: E731
    assert strip(rows) == strip(whole)


GCBC_OFFLINE = textwrap.dedent("""
    import sys
    import numpy as np
    from platonic_rl.agents import GCBCAgent
    from platonic_rl.agents.gcbc import GCBCConfig
    from platonic_rl.training.offline import TrainConfig, train_offline
    rng = np.random.default_rng(0)
    data = dict(observations=rng.normal(size=(5000, 4)).astype(np.float32),
                actions=rng.uniform(-1, 1, (5000, 2)).astype(np.float32),
                goals=rng.normal(size=(5000, 4)).astype(np.float32))
    agent = GCBCAgent.create(GCBCConfig(obs_dim=4, action_dim=2, hidden=(64, 64)), 0)
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    config = TrainConfig(steps=steps, batch_size=256, log_every=100, checkpoint_every=1000, progress=False)
    train_offline(agent, data, config, run_dir=sys.argv[1])
""")


@pytest.mark.slow
def test_the_offline_loop_sent_sigterm_mid_run_saves_there_and_resumes_equal_to_an_uninterrupted_run(tmp_path):
    """GCBC offline, 3,000 updates, checkpoints every 1,000: SIGTERM after the row of update 1,500."""
    run = lambda d: subprocess.Popen([sys.executable, "-c", GCBC_OFFLINE, str(d)], stderr=subprocess.PIPE,  # noqa
                                     text=True)
    proc, metrics = run(tmp_path / "a"), tmp_path / "a" / "metrics.jsonl"
    deadline = time.time() + 300
    while (not metrics.is_file() or '"step": 1500' not in metrics.read_text()) and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 75, err
    step = RunDirectory.saved_step(tmp_path / "a")
    assert 1500 <= step < 3000 and step % 100 == 0  # the row after the signal, not the last due checkpoint (1,000)
    for d in (tmp_path / "a", tmp_path / "b"):
        proc = run(d)
        assert proc.wait(timeout=300) == 0
    read = lambda d: [{k: v for k, v in json.loads(x).items() if k not in ("row_seconds", "wall_time")}  # noqa
                      for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert read(tmp_path / "a") == read(tmp_path / "b")


@pytest.mark.slow
def test_a_run_killed_twenty_times_at_random_moments_ends_equal_to_an_uninterrupted_run(tmp_path):
    """Soak: the offline loop (GCBC, 100,000 updates, checkpoints every 1,000: a minute or two uninterrupted) started
    again and again, each start killed after a random 1-8 s with SIGKILL or SIGTERM (mixed at random), 20 kills; then
    run to the end. Its rows and last checkpoint equal an uninterrupted run's."""
    import random

    rng = random.Random(0)
    run = lambda d: subprocess.Popen([sys.executable, "-c", GCBC_OFFLINE, str(d), "100000"],  # noqa: E731
                                     stderr=subprocess.DEVNULL)
    statuses = []
    for _ in range(20):
        proc = run(tmp_path / "a")
        time.sleep(rng.uniform(1.0, 8.0))
        proc.send_signal(rng.choice([signal.SIGKILL, signal.SIGTERM]))
        statuses.append((proc.wait(timeout=300), RunDirectory.saved_step(tmp_path / "a")))
    print("exit statuses and checkpoint steps after each kill:", statuses)
    assert all(s in (0, 75, -signal.SIGKILL, -signal.SIGTERM) for s, _ in statuses), statuses
    assert any(s == 75 for s, _ in statuses) and any(s == -signal.SIGKILL for s, _ in statuses)  # both kinds hit a run
    final = [run(tmp_path / "a"), run(tmp_path / "b")]
    assert [p.wait(timeout=600) for p in final] == [0, 0]
    read = lambda d: [{k: v for k, v in json.loads(x).items() if k not in ("row_seconds", "wall_time")}  # noqa
                      for x in (d / "metrics.jsonl").read_text().splitlines()]
    assert read(tmp_path / "a") == read(tmp_path / "b")
    assert RunDirectory.saved_step(tmp_path / "a") == 100_000
