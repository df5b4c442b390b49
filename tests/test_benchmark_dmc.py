"""benchmarks/dmc.py: Table D.5 betas, summaries, the printed table and the plots (synthetic runs)."""
import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.benchmarks import dmc as bd  # noqa: E402
from platonic_rl.envs.dmc import TASKS, VARIANTS  # noqa: E402


def fake_run(task, variant, method, returns, probe):
    return dict(task=task, variant=variant, method=method, seed=0, env_steps=[1000, 2000], train_return=[1.0, 2.0],
                eval_steps=[1000, 2000], eval_return=returns, probe=probe)


def test_betas_cover_every_setting_and_noiseless_is_unregularised():
    for task in TASKS:
        assert set(bd.BETAS[task]) == set(VARIANTS) and bd.BETAS[task]["noiseless"] == 1.0
        assert all(0 < b <= 1 for b in bd.BETAS[task].values())


def test_summary_table_and_plots(tmp_path):
    runs = [fake_run("cheetah-run", "distractors", "denoised", [10.0, 30.0],
                     {"x->agent_state": 0.8, "x->distractor_state": 0.1, "y->agent_state": 0.0,
                      "y->distractor_state": 0.9}),
            fake_run("reacher-easy", "distractors", "denoised", [50.0, 70.0],
                     {"x->agent_state": 0.6, "x->distractor_state": 0.3, "y->agent_state": 0.2,
                      "y->distractor_state": 0.7}),
            fake_run("cheetah-run", "distractors", "dreamer", [5.0, 5.0],
                     {"x->agent_state": 0.9, "x->distractor_state": 0.95})]
    summary = bd.summarise(runs)
    entry = summary["distractors"]["denoised"]
    assert entry["mean_return"] == pytest.approx((30.0 + 70.0) / 2)  # the evaluation at the budget, over tasks
    assert entry["mean_probe"]["x->distractor_state"] == pytest.approx(0.2)
    args = bd.Args(tasks=("cheetah-run", "reacher-easy"), variants=("distractors",), out_dir=str(tmp_path))
    table = bd.format_table(args, summary)
    assert "597.7" in table and "227.8" in table  # Table 5.1's video-background row, for orientation
    assert "dreamer" in table and table.splitlines()[-1].split()[5] == "-"  # Dreamer has no y
    bd.plot(tmp_path, args, runs, summary)
    assert (tmp_path / "returns.png").stat().st_size > 0 and (tmp_path / "probe.png").stat().st_size > 0
    assert np.isnan(bd.summarise([fake_run("reacher-easy", "noiseless", "dreamer", [1.0, 1.0],
                                           {"x->distractor_state": float("nan")})])
                    ["noiseless"]["dreamer"]["mean_probe"]["x->distractor_state"])


def test_unknown_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown task"):
        bd.run(bd.Args(tasks=("cartpole",), out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="unknown variant"):
        bd.run(bd.Args(variants=("video",), out_dir=str(tmp_path)))
