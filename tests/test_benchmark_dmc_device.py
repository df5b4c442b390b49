"""The device-loop DMC benchmark's bookkeeping (benchmarks/dmc_device.py), with the training replaced by a stub that
records its calls: a finished seed's record is reused, seeds run in separate calls end in one row, a record of
another budget is not mixed in, the tables and the plot are written, and bad arguments are named."""
import json

import pytest

from platonic_rl.benchmarks import dmc_device


@pytest.fixture
def trained(monkeypatch):
    """Stub training: each call's (variant, method, seed) is logged and returns a history whose evaluation returns
    encode the seed."""
    calls = []

    def train(config, env, loop, seed, run_dir, overwrite, desc):
        calls.append((env.variant, type(config).__name__, seed))
        history = [dict(env_steps=s, train_return=1.0, **({"eval_return": 100.0 * seed + s / 1000}
                                                           if s % 50 == 0 else {})) for s in (50, 75, 100)]
        return None, history

    monkeypatch.setattr(dmc_device, "train_world_model_on_device", train)
    return calls


def test_seeds_run_in_separate_calls_end_in_one_row_and_finished_ones_are_reused(tmp_path, trained):
    args = dict(parts=("learning",), methods=("dreamer",), variants=("distractors",), env_steps=100,
                out_dir=str(tmp_path))
    dmc_device.run(dmc_device.Args(seeds=(0,), **args))
    assert len(trained) == 1
    saved = dmc_device.run(dmc_device.Args(seeds=(1, 0), **args))
    assert [c[2] for c in trained] == [0, 1]  # seed 0 not trained again
    row = saved["learning"]["distractors dreamer"]
    assert row["final"] == {0: 0.1, 1: 100.1} and row["eval_steps"] == [50, 100]
    commit = dmc_device.report.source_commit()
    assert row["commits"] == {0: commit, 1: commit}   # each seed's run keeps the commit it ran at
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == [
        "cheetah-run_distractors_dreamer_seed0.json", "cheetah-run_distractors_dreamer_seed1.json"]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"].startswith("python -m platonic_rl.benchmarks.dmc_device")
    assert "seeds 0.1, 100.1" in results["table"]
    assert (tmp_path / "dmc_device.png").stat().st_size > 10_000
    # another budget: its own runs, the first budget's records left out of its row
    other = dmc_device.run(dmc_device.Args(seeds=(0,), **{**args, "env_steps": 200}))
    assert len(trained) == 3 and other["learning"]["distractors dreamer"]["final"] == {0: 0.1}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="--seeds must be distinct"):
        dmc_device.Args(seeds=(0, 0))
    with pytest.raises(ValueError, match="--methods needs at least one value"):
        dmc_device.Args(methods=())
    with pytest.raises(ValueError, match="--env-counts and --env-steps must be positive"):
        dmc_device.Args(env_steps=0)
