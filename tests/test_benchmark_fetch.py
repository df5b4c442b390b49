"""benchmarks/fetch.py: smoothing, the sample-efficiency ratio, agent factories, reports from logs."""
import dataclasses

import numpy as np
import pytest

from platonic_rl.benchmarks import fetch as bf


def test_smoothing_is_a_trailing_window_of_five():
    np.testing.assert_allclose(bf.smooth([0, 1, 2, 3, 4, 5, 6]), [0, 0.5, 1, 1.5, 2, 3, 4])


def test_efficiency_ratio_as_in_c33():
    steps = np.array([2000, 4000, 6000, 8000, 10000])
    qrl = np.array([0.1, 0.5, 0.8, 0.9, 0.95])
    peer = np.array([0.1, 0.2, 0.3, 0.4, 0.6])
    # QRL first exceeds the peer's final 0.6 at 6000 steps: ratio 10000 / 6000.
    assert bf.efficiency_ratio(steps, qrl, steps, peer) == pytest.approx(10000 / 6000)
    assert bf.efficiency_ratio(steps, peer, steps, qrl) is None


@pytest.mark.parametrize("name", ["qrl", "crl", "gcbc", "ddpg_her", "ddpg_her_mrn", "ddpg_her_iqe"])
def test_agent_factories(name):
    cls, config, overrides = bf.agent_config(name, "push")  # configs only: creating paper-size agents is slow
    assert config.obs_dim == 25 and hasattr(cls, "create")
    assert set(overrides) <= {"exploration_noise", "p_future"}
    with pytest.raises(ValueError, match="unknown agent"):
        bf.make_agent("sac", "reach", 0)


def test_presets_and_image_agents():
    _, cpu, _ = bf.agent_config("qrl", "reach", qrl_preset="cpu")
    assert cpu.iqe_components == 16 and cpu.encoder_hidden == (256, 256)
    assert cpu.transition_weight == 0.2 and cpu.phi_offset == 15.0  # the objective is unchanged
    _, image, _ = bf.agent_config("qrl", "reach", qrl_preset="cpu", obs="image")
    assert image.image_shape == (64, 64, 3) and image.transition_weight == 0.1
    assert image.encoder_hidden == (512,)  # C.3.3: backbone-512-128 for images
    with pytest.raises(ValueError, match="QRL agent only"):
        bf.agent_config("crl", "reach", obs="image")


def test_zero_action_reference_is_the_rate_of_episodes_solved_at_the_start(monkeypatch, tmp_path):
    # FetchPush: a gripper that never moves leaves the object where it starts, so the reference is exactly
    # the fraction of evaluation episodes whose object starts within the 5 cm success threshold.
    from platonic_rl.training.schedule import episode_seeds, eval_seed
    from platonic_rl.envs import fetch

    steps = [2000, 4000]
    reference = bf.zero_action_success("push", steps, episodes=10)
    env = fetch.make_vector_env("push", 5)
    expected = []
    for step in steps:
        seeds = episode_seeds(eval_seed(step), 10)  # one reset seed per episode
        starts = [env.reset(seed=seeds[5 * i:5 * (i + 1)])[0] for i in range(2)]
        gap = np.concatenate([np.linalg.norm(o["achieved_goal"] - o["desired_goal"], axis=-1) for o in starts])
        expected.append(float(np.mean(gap < 0.05)))
    env.close()
    assert reference == pytest.approx(expected)
    with pytest.raises(ValueError, match="episodes must be >= 1"):
        bf.zero_action_success("push", steps, episodes=0)
    # A peer not above the reference gets no efficiency ratio (it would compare noise); one above keeps it.
    monkeypatch.setattr(bf, "zero_action_success", lambda task, s, episodes=50: [0.0, 0.3])
    curve = lambda final: dict(final_success=final, env_steps=steps, smoothed_mean=[final / 2, final])  # noqa: E731
    record = dict(curves={"qrl": [dict(env_steps=steps)]},
                  summary={"qrl": dict(curve(0.95), smoothed_mean=[0.7, 0.95]), "crl": curve(0.16),
                           "gcbc": curve(0.6)})
    summary = bf.add_reference(record, "push")["summary"]  # reference smoothed final: (0.0 + 0.3) / 2
    assert summary["zero_action"]["final_success"] == pytest.approx(0.15)
    # crl is within 0.05 of it: no ratio; gcbc ends at 0.6, which QRL first exceeds at 2000 of 4000 steps.
    assert summary["crl"]["qrl_sample_efficiency_ratio"] is None
    assert summary["gcbc"]["qrl_sample_efficiency_ratio"] == pytest.approx(2.0)
    assert "did not learn" in bf.format_table(bf.Args(env="push"), summary)
    table = bf.format_table(bf.Args(env="push"), {"zero_action": dict(final_success=0.1)})
    assert "zero_action" in table and "x" not in table.splitlines()[-1].split()[-1]
    with pytest.raises(FileNotFoundError, match="add-reference-to"):
        bf.add_reference_to("/nonexistent/run")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "results.json").write_text('{"args": {}, "summary": {}, "curves": {}}')
    with pytest.raises(ValueError, match="saved before results recorded their commit"):
        bf.add_reference_to(str(tmp_path / "old"))


def test_from_logs_reports_runs_in_progress(tmp_path, monkeypatch):
    # Two seeds of a run stopped early, at different points: the report keeps the evaluations both reached.
    import json

    logged = {0: [0.1, 0.2, 0.4, 0.6], 1: [0.0, 0.2, 0.5]}
    for seed, success in logged.items():
        rows = [dict(env_steps=2000 * (i + 1), eval_success=v, cycle_seconds=60.0) for i, v in enumerate(success)]
        rows.insert(1, dict(env_steps=3000, cycle_seconds=50.0))  # a cycle without evaluation
        (tmp_path / f"qrl_seed{seed}").mkdir()
        (tmp_path / f"qrl_seed{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(bf, "zero_action_success", lambda task, steps, episodes=50: [0.0] * len(steps))
    args = bf.Args(agents=("qrl",), seeds=(0, 1), env_steps=10_000, out_dir=str(tmp_path), from_logs=True)
    record = bf.run(args)
    assert [r["env_steps"] for r in record["curves"]["qrl"]] == [[2000, 4000, 6000]] * 2
    assert record["summary"]["qrl"]["final_success"] == pytest.approx(np.mean([(0.1 + 0.2 + 0.4) / 3,
                                                                               (0.0 + 0.2 + 0.5) / 3]))
    assert record["curves"]["qrl"][0]["training_seconds"] == pytest.approx(4 * 60 + 50)
    assert "6000 env steps (of a 10000 budget)" in record["table"]
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "results.json").is_file()
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        bf.run(dataclasses.replace(args, seeds=(0, 7)))


def test_qrl_lookahead_is_a_row_of_the_same_runs(tmp_path, monkeypatch):
    import json

    for seed in (0, 1):
        rows = [dict(env_steps=2000 * (i + 1), eval_success=0.1 * i, eval_success_lookahead_k5=0.2 * i + seed / 10,
                     cycle_seconds=60.0) for i in range(3)]
        (tmp_path / f"qrl_seed{seed}").mkdir()
        (tmp_path / f"qrl_seed{seed}" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(bf, "zero_action_success", lambda task, steps, episodes=50: [0.0] * len(steps))
    args = bf.Args(agents=("qrl",), seeds=(0, 1), env_steps=10_000, out_dir=str(tmp_path),
                   from_logs=True, qrl_lookahead=(5,))
    record = bf.run(args)
    np.testing.assert_allclose([r["success"] for r in record["curves"]["qrl_lookahead_k5"]],
                               [[0.0, 0.2, 0.4], [0.1, 0.3, 0.5]])
    assert record["summary"]["qrl_lookahead_k5"]["final_success"] == pytest.approx(0.25)  # mean of 3, then seeds
    assert "qrl_lookahead_k5" in record["table"]
    spec = bf.lookahead_policies(args)["lookahead_k5"]
    assert spec.as_dict() == dict(policy="lookahead", hold_steps=5, grid_size=5)
    with pytest.raises(ValueError, match="--agents must include qrl"):
        bf.Args(agents=("crl",), qrl_lookahead=(5,))
    with pytest.raises(ValueError, match="--qrl-lookahead must be positive ints"):
        bf.Args(qrl_lookahead=(0,))
