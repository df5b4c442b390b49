"""training/loop.py: the driver every training loop runs on."""
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.training.loop import LoopRun
from platonic_rl.training.run import RunDirectory


def count_to(run_dir, steps, settings=None, fail_at=None):
    """A loop of its own on the driver: state x grows by 1 per row of 10 steps."""
    with LoopRun.start(dict(x=jnp.zeros(2)), budget=steps, run_dir=run_dir, progress=False,
                       settings=settings if settings is not None else dict(lr=0.1, steps=steps),
                       resumable=("steps",)) as loop:
        state, step = loop.state, loop.start_step
        while step < steps:
            if step == fail_at:
                raise RuntimeError("stopped")
            state, step = dict(x=state["x"] + 1), step + 10
            loop.finish_row({"step": step, "x": float(state["x"][0])}, step, state, due=True)
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
