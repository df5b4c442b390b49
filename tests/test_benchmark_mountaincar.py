import json

import numpy as np
import pytest

from platonic_rl.benchmarks import mountaincar as bench
from platonic_rl.envs import mountaincar as mc


def test_goals_and_oracles():
    table = mc.transition_table()
    goals = bench.make_goals(table)
    assert len(goals) == 10 and goals[0].name == "top of hill"
    assert all(g.target.sum() == 169 for g in goals[1:])  # 13 x 13 neighbourhoods
    full = bench.evaluate(lambda g: bench.oracle_policy(g.optimal_cost, table), goals, table)
    assert full["summary"]["top_of_hill"] == pytest.approx(100.0)
    assert full["summary"]["nine_states"] == pytest.approx(100.0)
    # The dataset oracle plans only over transitions seen in the data: never better than the full one.
    data_table = mc.dataset_table(mc.generate_dataset(0))
    partial = bench.evaluate(lambda g: bench.oracle_policy(mc.cost_to_go(g.target, data_table), data_table),
                             goals[:2], table)
    assert partial["summary"]["top_of_hill"] < 100.0


@pytest.mark.slow  # ~19 s end to end; goals and oracles are tested fast, training in tests/test_train.py
def test_benchmark_pipeline_with_a_small_network(tmp_path, monkeypatch):
    """The whole run (dataset, training, evaluation from all 25,600 states, table, picture, record) with a
    16-wide QRL: the quick preset's network is what makes the smoke run below slow on 2 cores."""
    from platonic_rl.benchmarks.presets import mountaincar_qrl_config
    from platonic_rl.training.offline import TrainConfig

    small = (mountaincar_qrl_config(16, 1, 8, 2, 4, 20, lr=1e-3), TrainConfig(steps=20, batch_size=64, log_every=10))
    monkeypatch.setitem(bench.PRESETS, "quick", small)
    record = bench.run(bench.Args(scale="quick", methods=("qrl_single", "qrl_multi"), steps=20, out_dir=str(tmp_path)))
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.mountaincar")
    assert saved["train_config"]["steps"] == 20 and saved["agent_configs"]["qrl_multi"]["encoder_hidden"] == [16]
    assert [r["goal"] for r in record["results"]["qrl_single"]["per_goal"]] == ["top of hill"]  # single: one goal
    assert len(record["results"]["qrl_multi"]["per_goal"]) == 10
    for method in ("qrl_single", "qrl_multi"):
        summary = record["results"][method]["summary"]
        top = record["results"][method]["per_goal"][0]  # the score is Table 4.1's normalisation of its returns
        assert summary["top_of_hill"] == top["score"] == pytest.approx(
            100 * (top["mean_return"] + 200) / (top["mean_optimal_return"] + 200))
        assert np.isfinite(summary["spearman_top_of_hill"])
    assert record["results"]["oracle_full"]["summary"]["top_of_hill"] == pytest.approx(100.0)
    assert (tmp_path / "values.png").stat().st_size > 10_000
    assert "NOT comparable" in record["table"] and "QRL multi-goal" in record["table"]


@pytest.mark.slow
def test_benchmark_smoke_run(tmp_path):
    record = bench.run(bench.Args(scale="quick", methods=("qrl_multi",), steps=500, out_dir=str(tmp_path)))
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.mountaincar")
    assert saved["train_config"]["steps"] == 500
    summary = record["results"]["qrl_multi"]["summary"]
    # Learned: 500 updates score 72.8 (seeded); the same network after 20 updates scores 15-16 (the test above).
    assert summary["top_of_hill"] > 50 and np.isfinite(summary["spearman_top_of_hill"])
    assert (tmp_path / "values.png").stat().st_size > 10_000
    assert "QRL multi-goal" in record["table"]


def test_the_presets_normalise_observations_and_grow_from_quick_to_paper():
    from platonic_rl.benchmarks.presets import mountaincar_presets

    presets = mountaincar_presets()
    assert list(presets) == ["quick", "cpu", "paper"]
    (quick, quick_train), (cpu, cpu_train), (paper, paper_train) = presets.values()
    assert all(config.obs_scale is not None for config, _ in presets.values())  # the velocity spans only +-0.07
    assert quick.encoder_hidden == (128, 128) and cpu.encoder_hidden == (256, 256)
    assert (quick_train.steps, cpu_train.steps, paper_train.steps) == (3_000, 30_000, 500_000)
    assert quick.cosine_decay_steps == quick_train.steps and cpu.cosine_decay_steps == cpu_train.steps
    assert paper_train.batch_size == 4096  # C.3.1
