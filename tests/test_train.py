import dataclasses
import json

import jax
import numpy as np
import pytest

from platonic_rl.agents.qrl import QRLAgent, QRLConfig
from platonic_rl.training.offline import TrainConfig, train_offline

TINY = QRLConfig(encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,), iqe_components=2,
                 iqe_dim_per_component=4, dynamics_hidden=(16,), cosine_decay_steps=40)


def data(n=500):
    rng = np.random.default_rng(0)
    return dict(observations=rng.normal(size=(n, 3)).astype(np.float32),
                actions=rng.integers(-1, 3, n).astype(np.int32),
                next_observations=rng.normal(size=(n, 3)).astype(np.float32),
                rewards=-np.ones(n, np.float32))


CONFIG = TrainConfig(steps=40, batch_size=32, log_every=10, checkpoint_every=20, progress=False)


def leaves_equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_resume_gives_the_same_result_as_an_uninterrupted_run(tmp_path):
    full, full_hist = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path / "full")
    # "Preempted" run: stops after 20 steps (checkpoint written), then a new process resumes.
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path / "cut")
    resumed, resumed_hist = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path / "cut")
    leaves_equal(full, resumed)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("wall_time", "row_seconds")} for r in rows]  # noqa: E731
    assert strip(full_hist) == strip(resumed_hist)
    rows = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    csv_lines = (tmp_path / "cut" / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[0].startswith("step,")
    assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()) == ["20", "40"]


def test_without_resume_training_starts_over_and_is_deterministic(tmp_path):
    a, _ = train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path / "x")
    b, _ = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, resume=False),
                         tmp_path / "y")
    leaves_equal(a, b)
    c, _ = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, seed=1))
    assert not np.array_equal(np.asarray(c.lagrange_raw), np.asarray(a.lagrange_raw))


def test_corrupt_checkpoint_gives_a_clear_error(tmp_path):
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), tmp_path)
    for f in (tmp_path / "checkpoints" / "20").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="cannot be restored.*delete"):
        train_offline(QRLAgent.create(TINY, 0), data(), CONFIG, tmp_path)


def test_bad_config_and_data_are_rejected():
    with pytest.raises(ValueError, match="multiple of log_every"):
        TrainConfig(steps=45, log_every=10)
    with pytest.raises(ValueError, match="checkpoint_every"):
        TrainConfig(steps=40, log_every=10, checkpoint_every=15)
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(batch_size=0)
    bad = data()
    bad["rewards"] = bad["rewards"][:10]
    with pytest.raises(ValueError, match="leading dimension"):
        train_offline(QRLAgent.create(TINY, 0), bad, CONFIG)


def test_the_split_into_compiled_calls_does_not_change_the_run(tmp_path):
    one, hist_one = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, updates_per_call=10))
    two, hist_two = train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, updates_per_call=5))
    leaves_equal(one, two)
    # Rows hold means over log_every updates whichever the split: equal up to float32 summation order.
    for a, b in zip(hist_one, hist_two):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-5)
    with pytest.raises(ValueError, match="updates_per_call"):
        TrainConfig(steps=40, log_every=10, updates_per_call=4)


def test_resuming_with_other_settings_is_refused_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, steps=20), run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    other_agent = dataclasses.replace(TINY, learning_rate=1e-3)
    with pytest.raises(ValueError, match=r"agent_config\.learning_rate: saved 0\.0005, now 0\.001"):
        train_offline(QRLAgent.create(other_agent, 0), data(), CONFIG, run)
    with pytest.raises(ValueError, match=r"(?s)train_config\.batch_size.*train_config\.seed"):
        train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, batch_size=16, seed=3), run)
    other_data = data()
    other_data["rewards"] = other_data["rewards"] * 2
    with pytest.raises(ValueError, match=r"data\.rewards\.sha256"):
        train_offline(QRLAgent.create(TINY, 0), other_data, CONFIG, run)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # A larger budget (and other display settings) may change: that continues the run.
    train_offline(QRLAgent.create(TINY, 0), data(), dataclasses.replace(CONFIG, updates_per_call=5), run)
    assert json.loads((run / "config.json").read_text())["settings"]["train_config"]["batch_size"] == 32
