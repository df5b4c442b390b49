"""The OGBench point-maze benchmark: a tiny run trains, evaluates as OGBench does, saves its record and reuses
finished (dataset, method) pairs; bad arguments are refused."""
import dataclasses
import json

import numpy as np
import pytest

from platonic_rl.benchmarks import ogbench


def _tiny_argv(tmp_path, methods):
    return ["--scale", "tiny", "--datasets", "pointmaze-medium-stitch-v0", "--methods", *methods, "--seeds", "0",
            "--qrl-updates", "50", "--other-updates", "50", "--episodes-per-task", "1",
            "--data-root", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")]


def test_tiny_run_saves_the_table_beside_ogbenchs_and_reuses_finished_pairs(tmp_path, capsys):
    """Data generated with OGBench's procedure, GCBC trained and evaluated on OGBench's five tasks, the table saved,
    a rerun reading every finished pair back (QRL's signals in the record: the slow test below)."""
    pytest.importorskip("ogbench")
    argv = _tiny_argv(tmp_path, ["gcbc"])
    record = ogbench.main(argv)
    r = record["results"]["pointmaze-medium-stitch-v0"]["gcbc"]
    assert r["updates"] == 50 and len(r["per_seed"]) == 1 and len(r["per_seed"][0]["task_success"]) == 5
    # 50 updates reach no task's goal (seeded); a seed's success is its tasks' mean, the row's the seeds' (percent).
    seed = r["per_seed"][0]
    assert seed["task_success"] == [0.0] * 5 and seed["success"] == np.mean(seed["task_success"])
    assert (r["mean"], r["std"]) == (seed["success"], 0.0) == (0.0, 0.0)
    reference = record["straight_line"]["pointmaze-medium-stitch-v0"]
    assert reference["episodes_per_task"] == 1 and len(reference["task_success"]) == 5
    assert record["datasets"]["pointmaze-medium-stitch-v0"]["transitions"] == 20 * 200
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.ogbench") and saved["paper"]
    assert "(23 ± 18)" in saved["table"] and "tiny" in saved["table"]  # OGBench's GCBC beside ours
    capsys.readouterr()
    again = ogbench.main(argv)  # every pair finished: read back, nothing trained or evaluated
    assert json.dumps(again["results"], sort_keys=True) == json.dumps(saved["results"], sort_keys=True)
    assert "x1 seeds" not in capsys.readouterr().err


@pytest.mark.slow
def test_tiny_qrl_run_records_its_convergence_signals_and_its_policies_reuse_it(tmp_path, monkeypatch):
    pytest.importorskip("ogbench")
    trained, train_one = [], ogbench.train_one
    monkeypatch.setattr(ogbench, "train_one", lambda *a, **k: trained.append(a[1]) or train_one(*a, **k))
    rows = ["qrl", "qrl_lookahead", "qrl_waypoints_lookahead"]
    record = ogbench.main(_tiny_argv(tmp_path, rows))
    assert trained == ["qrl"]  # QRL trained once, for its three rows
    results = record["results"]["pointmaze-medium-stitch-v0"]
    assert results["qrl_lookahead"]["policy_settings"] == dict(hold_steps=5, cap_to_goal_distance=False)
    assert results["qrl_waypoints_lookahead"]["policy_settings"] == dict(reach=20.0, num_waypoints=100, replan_every=5,
                                                                         inner="lookahead", hold_steps=5,
                                                                         cap_to_goal_distance=False)
    assert all(len(results[r]["per_seed"][0]["task_success"]) == 5 for r in rows)
    again = ogbench.main(_tiny_argv(tmp_path, rows) + ["--hold-steps", "3"])  # other settings: evaluated again
    assert again["results"]["pointmaze-medium-stitch-v0"]["qrl_lookahead"]["policy_settings"] == dict(
        hold_steps=3, cap_to_goal_distance=False)
    r = results["qrl"]
    assert r["updates"] == 50 and len(r["per_seed"][0]["task_success"]) == 5
    signals = r["signals"]  # the convergence signals at the end of training, averaged over seeds
    assert signals["step"] == 50 and signals["critic0/lagrange_multiplier"] > 0 and "critic1/violation" in signals
    assert "(80 ± 12)" in json.loads((tmp_path / "out" / "results.json").read_text())["table"]  # OGBench's QRL


@pytest.mark.parametrize("kwargs, message", [(dict(seeds=(0, 0)), "distinct"), (dict(qrl_updates=0), "--qrl-updates"),
                                             (dict(episodes_per_task=0), "--episodes-per-task"),
                                             (dict(methods=()), "at least one")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ogbench.Args(**kwargs)


def test_the_straight_line_reference_heads_for_the_goal_at_full_speed():
    obs, goals = np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[3.0, 4.0], [1.0, 1.0]])
    np.testing.assert_allclose(ogbench.straight_line(obs, goals), [[0.6, 0.8], [0.0, 0.0]], atol=1e-6)


def test_every_method_has_a_config_and_the_paper_every_cell():
    scale = ogbench.scales()["tiny"]
    for method in ogbench.TRAINED:
        agent_class, config, train, sampling = ogbench.method_setup(method, scale, 10)
        assert config.obs_dim == 2 and train.steps == 10
    for dataset in ogbench.DATASETS:  # GCIVL's, GCIQL's and HIQL's published numbers are not quoted (unchecked at the source)
        assert set(ogbench.PAPER[dataset]) == set(ogbench.TRAINED) - {"gcivl", "gciql", "hiql"}
    assert {row.trains for row in ogbench.ROWS.values()} == set(ogbench.TRAINED)
    with pytest.raises(ValueError, match="method must be one of"):
        ogbench.method_setup("iql", scale, 10)
    # OGBench's goals: GCBC's and QRL's behaviour-cloning goals uniform over the episode's future, QRL's critic goals
    # random states; --goals geometric draws them as the maze2d benchmark does.
    assert ogbench.method_setup("gcbc", scale, 10)[3] == dict(p_future=1.0, future="uniform")
    assert ogbench.method_setup("qrl", scale, 10)[3] == dict(p_future=0.0, bc_goals=True, bc_future="uniform")
    assert ogbench.method_setup("qrl", scale, 10, "geometric")[3]["bc_future"] == "geometric"
    assert ogbench.run_name("d", "crl", "geometric") == "d-crl" and ogbench.run_name("d", "qrl", "geometric") == \
        "d-qrl-geometric"
    with pytest.raises(ValueError, match="goals must be"):
        ogbench.method_setup("gcbc", scale, 10, "random")


def test_the_qrl_ladder_continues_one_run_and_evaluates_each_budget(tmp_path, monkeypatch, capsys):
    trained, evaluated = [], []

    def fake_train(dataset, method, data, scale, args, out):
        updates = ogbench.updates_of(method, scale, args)
        trained.append((method, updates, args.overwrite))
        return None, dict(updates=updates, train_seconds=1.0, signals={"critic0/lagrange_multiplier": updates / 100.0})

    def fake_evaluate(dataset, method, stack, training, data, extent, scale, args):
        evaluated.append((method, training["updates"]))
        return dict(method=method, policy_settings=ogbench.policy_settings(ogbench.ROWS[method], scale, args),
                    **training, mean=training["updates"] / 10.0, std=0.0, eval_seconds=1.0)

    monkeypatch.setattr(ogbench, "train_one", fake_train)
    monkeypatch.setattr(ogbench, "evaluate_row", fake_evaluate)
    monkeypatch.setattr(ogbench, "straight_line_reference", lambda dataset, episodes, out: dict(success=10.0))
    monkeypatch.setattr(ogbench.ogbench_maze, "make_dataset", lambda *a, **k: "data")
    monkeypatch.setattr(ogbench, "load_dataset", lambda path: dict(
        observations=np.zeros((4, 2), np.float32), next_observations=np.zeros((4, 2), np.float32),
        actions=np.zeros((4, 2), np.float32), segment_end=np.array([0, 1, 0, 1], bool)))
    args = ogbench.Args(scale="tiny", datasets=("pointmaze-medium-navigate-v0",), methods=("qrl", "gcbc"), seeds=(0,),
                        qrl_ladder=(100, 200), out_dir=str(tmp_path))
    record = ogbench.run(args)
    # QRL through 100 then 200 (the table's budget: the ladder's last, whose record the table takes), GCBC once.
    assert trained == [("qrl", 100, False), ("qrl", 200, False), ("gcbc", 300, False)]
    assert evaluated == [("qrl", 100), ("qrl", 200), ("gcbc", 300)]
    ladder = record["ladder"]["pointmaze-medium-navigate-v0"]
    assert {b: r["qrl"]["mean"] for b, r in ladder.items()} == {100: 10.0, 200: 20.0}
    assert (tmp_path / "evals" / "pointmaze-medium-navigate-v0-qrl@updates=100.json").is_file()
    assert "multiplier 2" in record["table"] and record["results"]["pointmaze-medium-navigate-v0"]["qrl"]["updates"] == 200
    trained.clear(), evaluated.clear()
    ogbench.run(args)  # every budget recorded: nothing trained or evaluated again
    assert trained == [] and evaluated == []
    ogbench.run(ogbench.Args(**{**vars(args), "qrl_ladder": (100, 200, 400)}))  # a rung more: only it (and the table)
    assert trained == [("qrl", 400, False)] and evaluated == [("qrl", 400)]
    (tmp_path / "runs" / "pointmaze-medium-navigate-v0-qrl" / "checkpoints" / "400").mkdir(parents=True)
    with pytest.raises(ValueError, match="no record at 300 updates and its run is already at 400"):
        ogbench.run(ogbench.Args(**{**vars(args), "qrl_ladder": (100, 300, 400)}))  # a run cannot go back
    # A row added after the run passed a rung is evaluated from the rungs the run has not passed.
    trained.clear(), evaluated.clear()
    record = ogbench.run(ogbench.Args(**{**vars(args), "methods": ("qrl", "qrl_lookahead", "gcbc"),
                                         "qrl_ladder": (100, 200, 400)}))
    assert evaluated == [("qrl_lookahead", 400)] and trained == [("qrl", 400, False)]
    assert set(record["ladder"]["pointmaze-medium-navigate-v0"][200]) == {"qrl"}
    assert set(record["ladder"]["pointmaze-medium-navigate-v0"][400]) == {"qrl", "qrl_lookahead"}
    assert "qrl_lookahead: not evaluated (added after the run passed this budget; it is at 400)" in capsys.readouterr().out
    trained.clear()
    ogbench.run(ogbench.Args(**{**vars(args), "overwrite": True}))  # cleared once, at the first rung
    assert trained == [("qrl", 100, True), ("qrl", 200, False), ("gcbc", 300, True)]
    with pytest.raises(ValueError, match="--qrl-ladder must be multiples of the cpu scale's 1000 updates"):
        ogbench.Args(scale="cpu", qrl_ladder=(1500,))
    # A run continues from budget to budget: its settings at two budgets differ only where a resumed run may.
    from platonic_rl.common.settings import fields_on_resume
    first, second = (ogbench.method_setup("qrl", ogbench.scales()["cpu"], n)[2] for n in (20_000, 40_000))
    first, second = dataclasses.asdict(first), dataclasses.asdict(second)
    assert {k for k in first if first[k] != second[k]} <= set(fields_on_resume(ogbench.TrainConfig))
    with pytest.raises(ValueError, match="below the ladder's last budget 400"):
        ogbench.Args(qrl_ladder=(100, 400), qrl_updates=200)
    with pytest.raises(ValueError, match="increasing positive budgets"):
        ogbench.Args(qrl_ladder=(200, 100))
    with pytest.raises(ValueError, match="--methods must include one"):
        ogbench.Args(qrl_ladder=(100,), methods=("gcbc",))


def test_gcivl_trains_on_ogbenchs_value_and_actor_goals():
    """GCIVL's row: OGBench's value goals (20% the state itself, 50% a geometric future state, 30% random) and actor
    goals (a uniform future state; geometric with --goals geometric), at the scale's widths."""
    from platonic_rl.agents.gcivl import GCIVLAgent

    scale = ogbench.scales()["cpu"]
    agent_class, config, train, sampling = ogbench.method_setup("gcivl", scale, 20_000, "ogbench")
    assert agent_class is GCIVLAgent and config.value_hidden == config.actor_hidden == (128, 128)
    assert sampling == dict(p_future=0.5, p_current=0.2, bc_goals=True, bc_future="uniform")
    assert ogbench.method_setup("gcivl", scale, 20_000, "geometric")[3]["bc_future"] == "geometric"
    assert train.steps == 20_000 and ogbench.updates_of("gcivl", scale, ogbench.Args()) == scale.other_updates
    # HIQL: the same value goals, the low actor's goals 25 steps ahead
    assert ogbench.method_setup("hiql", scale, 20_000, "ogbench")[3] == dict(sampling, subgoal_steps=25)
    # GCIQL: the same goals; DDPG+BC's alpha as OGBench's point-maze commands set it
    agent_class, config, _, gciql_sampling = ogbench.method_setup("gciql", scale, 20_000, "ogbench")
    assert agent_class.__name__ == "GCIQLAgent" and config.bc_alpha == 0.003 and gciql_sampling == sampling


def test_the_giant_maze_gets_ogbenchs_discount_where_a_method_uses_one():
    """OGBench's commands set gamma 0.995 on the giant maze: the value methods' discount and their geometric goals';
    QRL's and GCBC's OGBench goals are uniform (no discount), and the other mazes' settings are unchanged."""
    from platonic_rl.envs import ogbench_maze

    scale = ogbench.scales()["cpu"]
    assert [ogbench_maze.get_spec(d).discount for d in ("pointmaze-giant-navigate-v0", "pointmaze-giant-stitch-v0",
                                                        "pointmaze-large-stitch-v0")] == [0.995, 0.995, 0.99]
    for method in ("gcivl", "gciql", "hiql"):
        _, config, _, sampling = ogbench.method_setup(method, scale, 20_000, "ogbench", 0.995)
        assert config.discount == 0.995 and sampling["discount"] == 0.995, method
        assert ogbench.method_setup(method, scale, 20_000, "ogbench", 0.99)[1].discount == 0.99
    assert ogbench.method_setup("crl", scale, 20_000, "ogbench", 0.995)[3] == dict(p_future=1.0, discount=0.995)
    assert ogbench.method_setup("qrl", scale, 20_000, "ogbench", 0.995)[3] == ogbench.method_setup(
        "qrl", scale, 20_000, "ogbench")[3]
    assert ogbench.method_setup("gcbc", scale, 20_000, "geometric", 0.995)[3]["discount"] == 0.995
    with pytest.raises(ValueError, match="discount must be in"):
        ogbench.method_setup("gcivl", scale, 20_000, "ogbench", 1.0)


def test_the_stitch_datasets_give_the_value_methods_random_actor_goals_half_the_time():
    from platonic_rl.envs import ogbench_maze

    scale = ogbench.scales()["cpu"]
    assert [ogbench_maze.get_spec(d).actor_random_goals for d in ("pointmaze-giant-stitch-v0",
                                                                  "pointmaze-medium-navigate-v0")] == [0.5, 0.0]
    for method in ("gcivl", "gciql", "hiql"):
        assert ogbench.method_setup(method, scale, 20_000, "ogbench", 0.99, 0.5)[3]["bc_p_random"] == 0.5
        assert "bc_p_random" not in ogbench.method_setup(method, scale, 20_000, "ogbench", 0.99, 0.0)[3]
    for method in ("qrl", "crl", "gcbc"):
        assert "bc_p_random" not in ogbench.method_setup(method, scale, 20_000, "ogbench", 0.99, 0.5)[3]
    with pytest.raises(ValueError, match="actor_random_goals must be in"):
        ogbench.method_setup("hiql", scale, 20_000, "ogbench", 0.99, 1.5)
