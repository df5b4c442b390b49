"""The docs' rendered tables: current with their records, and a number changed by hand in a page is found."""
import json
import re

import pytest

from platonic_rl.benchmarks import render_docs
from platonic_rl.benchmarks.render_docs import RESULTS, RenderError, differences, render_page


def _write_records(root, **records):
    """Each record as ``root/NAME/results.json``."""
    for name, record in records.items():
        (root / name).mkdir(parents=True)
        (root / name / "results.json").write_text(json.dumps(record))


def test_every_rendered_table_matches_its_records():
    assert differences() == [], "run `python3 -m platonic_rl.benchmarks.render_docs` and commit the pages"


def test_the_pages_render_tables_of_each_kind():
    kinds = {block.renderer for page in render_docs.pages() for block in render_docs.blocks(page)}
    assert kinds == set(render_docs.RENDERERS)


def test_a_number_changed_by_hand_is_put_back():
    text = RESULTS.read_text()
    block = next(b for b in render_docs.blocks(RESULTS) if b.renderer == "ogbench_success")
    cell = re.search(r"\d+\.\d ± \d+\.\d", block.body)[0]  # the table's first score
    edited = text[:block.start] + block.body.replace(cell, "99.9 ± 9.9", 1) + text[block.end:]
    assert edited != text
    assert render_page(RESULTS, edited) == text


def test_a_status_changed_in_its_section_changes_the_tables_that_show_it():
    text = RESULTS.read_text()
    section = text.index("## Device loop")
    status = text.index("**Status: met**", section)
    edited = text[:status] + "**Status: missed**" + text[status + len("**Status: met**"):]
    rendered = render_page(RESULTS, edited)
    assert "| [Device loop](#device-loop) | QRL >= 0.9 on the point mazes, ahead of Contrastive RL | missed |" in rendered
    counts = render_docs.render_status_counts(render_docs.blocks(RESULTS, rendered)[0])
    met = render_docs.render_status_counts(render_docs.blocks(RESULTS, text)[0])
    meeting = lambda sentence: int(re.search(r"(\d+) of the \d+ benchmarks meet", sentence)[1])  # noqa: E731
    missing = lambda sentence: int(re.search(r"(\d+) miss it", sentence)[1])  # noqa: E731
    assert (meeting(counts), missing(counts)) == (meeting(met) - 1, missing(met) + 1)


def _ogbench_record(path, results, straight, paper):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(command="python -m platonic_rl.benchmarks.ogbench --scale cpu",
                                    commit="0123456789abcdef+modified", results=results, straight_line=straight,
                                    paper=paper)))


def test_ogbench_success_bolds_the_best_and_marks_what_no_record_holds(tmp_path):
    first, second = tmp_path / "results" / "a" / "results.json", tmp_path / "results" / "b" / "results.json"
    _ogbench_record(first, {"d1": {"qrl": dict(mean=50.0, std=1.25), "gcbc": dict(mean=60.0, std=0.0)},
                            "d2": {"qrl": dict(mean=10.0, std=2.0)}},
                    {"d1": dict(success=40.0), "d2": dict(success=5.0)}, {"d1": {"qrl": [82, 5]}})
    _ogbench_record(second, {"d1": {"hiql": dict(mean=70.04, std=3.0)}}, {}, {})
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- rendered: ogbench_success results/a/results.json results/b/results.json -->\n"
                    "<!-- /rendered -->\nafter\n")
    assert render_page(page).split("\n") == [
        "intro",
        "<!-- rendered: ogbench_success results/a/results.json results/b/results.json -->",
        "| dataset | QRL (+BC) | GCBC | HIQL | straight line | OGBench: QRL |",
        "|---|---|---|---|---|---|",
        "| d1 | 50.0 ± 1.2 | 60.0 ± 0.0 | **70.0 ± 3.0** | 40.0 | 82 ± 5 |",
        "| d2 | **10.0 ± 2.0** | – | – | 5.0 | – |",
        "",
        "Records: [results/a](results/a/results.json) (commit 0123456+modified), [results/b](results/b/results.json) "
        "(commit 0123456+modified)",
        "<!-- /rendered -->",
        "after",
        ""]
    page.write_text(page.read_text().replace("results/b/results.json -->", "results/b/results.json methods=gcbc,qrl "
                                                                           "paper=no -->"))
    assert "| dataset | GCBC | QRL (+BC) | straight line |" in render_page(page)


def test_ogbench_success_names_budgets_takes_chosen_methods_and_prints_a_mean_published_alone(tmp_path):
    first, second = tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"
    _ogbench_record(first, {"d1": {"qrl": dict(mean=50.0, std=1.0, updates=20_000)},
                            "d2": {"qrl": dict(mean=10.0, std=2.0, updates=20_000)},
                            "d3": {"qrl": dict(mean=30.0, std=2.0, updates=40_000)}},
                    {"d1": dict(success=40.0)}, {"d3": {"qrl": [68, None]}})
    _ogbench_record(second, {"d1": {"qrl": dict(mean=99.0, std=0.0, updates=40_000),  # not taken: qrl not chosen
                                    "qrl_graph_waypoints": dict(mean=90.0, std=3.0, updates=40_000)}},
                    {"d1": dict(success=39.0)}, {})
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: ogbench_success a/results.json b/results.json:qrl_graph_waypoints -->\n"
                    "<!-- /rendered -->\n")
    assert render_page(page).split("\n")[1:7] == [
        "| dataset | QRL (+BC), 20k | QRL, graph waypoints + actor, 40k | straight line | OGBench: QRL |",
        "|---|---|---|---|---|",
        "| d1 | 50.0 ± 1.0 | **90.0 ± 3.0** | 40.0 | – |",  # the first record's straight line
        "| d2 | **10.0 ± 2.0** | – | – | – |",
        "| d3 | **30.0 ± 2.0** (40k) | – | – | 68 |",
        ""]


def test_ogbench_tasks_averages_each_task_over_seeds_and_shows_their_range(tmp_path):
    seeds = [dict(seed=0, success=40.0, task_success=[100.0, 0.0, 0.0, 50.0, 50.0]),
             dict(seed=1, success=60.0, task_success=[100.0, 0.0, 20.0, 80.0, 100.0])]
    _ogbench_record(tmp_path / "r" / "results.json", {"d1": {"gcivl": dict(mean=50.0, std=10.0, per_seed=seeds)}},
                    {"d1": dict(success=40.0, task_success=[100.0, 100.0, 0.0, 0.0, 0.0])}, {})
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: ogbench_tasks r/results.json -->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    assert lines[3:5] == ["| d1 | GCIVL | 100 | 0 | 10 (0-20) | 65 (50-80) | 75 (50-100) | 50.0 |",
                          "| d1 | straight line | 100 | 100 | 0 | 0 | 0 | 40.0 |"]
    page.write_text("<!-- rendered: ogbench_tasks r/results.json methods=gcivl -->\n<!-- /rendered -->\n")
    assert "straight line" not in render_page(page)


def test_bad_markers_are_refused_naming_the_page_and_the_problem(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: no_such_table -->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match=r"page.md: unknown renderer 'no_such_table'"):
        render_page(page)
    page.write_text("<!-- rendered: ogbench_success missing/results.json -->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match=r"record .*missing/results.json does not exist"):
        render_page(page)


def _maze2d_eval(folder, layout, method, single, multi, at_end=None, seconds=None):
    entry = {g: dict(mean=v, **({} if at_end is None else dict(at_goal_at_end_mean=at_end[i])))
             for i, (g, v) in enumerate((("single", single), ("multi", multi)))}
    if seconds is not None:
        entry["seconds_per_action"] = seconds
    (folder / "evals").mkdir(parents=True, exist_ok=True)
    (folder / "evals" / f"{layout}-{method}.json").write_text(json.dumps(entry))


def test_maze2d_scores_reads_each_layout_from_the_first_folder_holding_it(tmp_path):
    first, second = tmp_path / "results" / "a", tmp_path / "results" / "b"
    for folder, commit in ((first, "aaaaaaa1"), (second, "bbbbbbb2")):
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps(dict(commit=commit, paper={"qrl": dict(
            single=dict(large=1.0, medium=2.0, umaze=3.0), multi=dict(large=4.0, medium=5.0, umaze=6.04))})))
    _maze2d_eval(first, "large", "p", 10.0, 20.0, seconds=0.002)
    _maze2d_eval(first, "medium", "p", 30.0, 40.0, at_end=(1.0, 0.5), seconds=0.004)
    _maze2d_eval(second, "medium", "p", -1.0, -1.0)  # shadowed by the first folder's
    _maze2d_eval(second, "umaze", "p", 50.0, 60.0, seconds=0.00304)
    for layout in ("large", "medium", "umaze"):
        _maze2d_eval(second, layout, "q", 15.0, 20.0)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: maze2d_scores\n"
                    "policy p | p | results/a results/b | g\n"
                    "policy q | q | results/b | g\n"
                    "published | paper:qrl | results/a\n"
                    "-->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    # p: (10 + 20 + 30 + 40 + 50 + 60) / 6 = 35.0; q: 35 / 2 = 17.5; the paper's (1 + 2 + 3 + 4 + 5 + 6.04) / 6
    assert lines[5:11] == [
        "| method | large | medium | umaze | average of six | at the goal at the end (L / M / U) | ms per action |",
        "|---|---|---|---|---|---|---|",
        "| policy p | 10.0 / 20.0 | **30.0 / 40.0** | **50.0 / 60.0** | **35.0** | – / 0.75 / – | 2.0-4.0 |",
        "| policy q | **15.0 / 20.0** | 15.0 / 20.0 | 15.0 / 20.0 | 17.5 |  |  |",
        "| published | 1.0 / 4.0 | 2.0 / 5.0 | 3.0 / 6.0 | 3.5 |  |  |",
        ""]
    assert lines[11] == ("Records: [results/a](results/a/results.json) (commit aaaaaaa), "
                         "[results/b](results/b/results.json) (commit bbbbbbb)")


def test_maze2d_scores_marks_a_layout_not_run_and_refuses_a_bad_row_or_a_row_never_run(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: maze2d_scores\nonly a label\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match=r"must read 'LABEL \| METHOD \| FOLDER"):
        render_page(page)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.json").write_text(json.dumps(dict(commit="0123456789")))
    _maze2d_eval(tmp_path / "r", "large", "p", 1.0, 2.0)
    _maze2d_eval(tmp_path / "r", "large", "q", 5.0, 2.0)
    page.write_text("<!-- rendered: maze2d_scores\nrow | p | r | g\nother | q | r | g\n-->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[6:8] == ["| row | 1.0 / 2.0 | not run | not run | – |  |  |",
                                                   "| other | **5.0 / 2.0** | not run | not run | – |  |  |"]
    page.write_text("<!-- rendered: maze2d_scores\nrow | p_typo | r\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match=r"no evals/<layout>-p_typo.json in"):
        render_page(page)


def test_ogbench_time_adds_generation_training_and_evaluation_in_minutes(tmp_path):
    seeds = [dict(seed=s, success=1.0, task_success=[1.0] * 5) for s in range(3)]
    path = tmp_path / "r" / "results.json"
    path.parent.mkdir()
    path.write_text(json.dumps(dict(
        datasets={"d1": dict(generation_seconds=120.0), "d2": {}},
        results={"d1": {"qrl": dict(updates=40_000, train_seconds=5.0, signals=dict(wall_time=1800.0),
                                    eval_seconds=60.0, matmul_peak_gflops=301.6, per_seed=seeds),
                        "hiql": dict(updates=20_000, train_seconds=600.0, eval_seconds=30.0, per_seed=seeds)},
                 "d2": {"qrl": dict(updates=40_000, train_seconds=6.0, eval_seconds=6.0, per_seed=seeds[:1])}})))
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: ogbench_time r/results.json methods=qrl,hiql -->\n<!-- /rendered -->\n")
    # d1 QRL: the run's own wall time (1800 s) rather than the call's 5 s (a finished run read back); (120 + 1800 +
    # 60) / 60 = 33.0 minutes; HIQL (120 + 600 + 30) / 60 = 12.5, no peak recorded; d2: no generation time, no total
    assert render_page(page).split("\n")[3:6] == [
        "| d1 | QRL (+BC) | 40k x 3 | 2.0 | 30.0 | 1.0 | 33.0 | 302 |",
        "| d1 | HIQL | 20k x 3 | 2.0 | 10.0 | 0.5 | 12.5 | – |",
        "| d2 | QRL (+BC) | 40k x 1 | – | 0.1 | 0.1 | – | – |"]


def test_speed_compiled_splits_each_profiled_update_into_products_and_the_rest(tmp_path):
    path = tmp_path / "s" / "results.json"
    path.parent.mkdir()
    compiled = dict(wall_ms=9.0, traced_ms=10.0, products_ms=4.0, other_ms=6.0,
                    groups=[["QRL.head", 3.0], ["(top level)", 1.25], ["x", 0.5], ["y", 0.25]], instructions=40)
    path.write_text(json.dumps(dict(matmul_peak_gflops=301.6, updates={
        "qrl": dict(size="small", ms_one_call=8.0, profile=dict(compiled=compiled)),
        "gcbc": dict(size="tiny", ms_one_call=1.0)})))  # not profiled: no row
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: speed_compiled s/results.json -->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    # update / products: the traced steps over the products' (10 / 4); the three largest parts of the rest
    assert lines[3] == "| qrl | small | 8 | 10 | 4 (40%) | 6 | 2.50 | QRL.head 3; (top level) 1.2; x 0.5 |"
    assert lines[4] == ""
    assert lines[5].startswith("float32 matmul peak measured in the same run: 302 GFLOP/s.")


def test_ogbench_teleport_averages_each_task_over_seeds_and_lists_the_learned_costs(tmp_path):
    def task(success, teleported, trapped):
        return dict(success=success, teleported=teleported, trapped=trapped)

    def seed(n, rows, costs):
        return dict(seed=n, learned=dict(in_to_out=costs), episodes=dict(qrl=rows))

    rows0 = [task(1.0, 0.0, 0.0), task(0.5, 1.0, 0.5), task(0.0, 0.0, 0.0), task(0.0, 0.0, 0.0), task(0.0, 0.0, 0.0)]
    rows1 = [task(0.0, 0.0, 0.0), task(0.0, 1.0, 1.0), task(0.0, 0.0, 0.0), task(0.0, 0.0, 0.0), task(0.5, 0.5, 0.0)]
    record = dict(teleporters=dict(inbound=[[0, 0]], outbound_cells=[[1, 7], [6, 1]], walled_in=[True, False]),
                  per_seed=[seed(0, rows0, [[1.0, 4.0]]), seed(1, rows1, [[3.0, 2.0]])])
    _write_records(tmp_path, r=record)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: ogbench_teleport r/results.json -->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    assert lines[3:6] == ["| QRL (+BC) | success | 50 | 25 | 0 | 0 | 25 | 20.0 |",
                          "|  | through a teleporter | 0 | 100 | 0 | 0 | 25 | 25.0 |",
                          "|  | ended walled in | 0 | 75 | 0 | 0 | 0 | 15.0 |"]
    assert lines[7] == "| learned cost d(in, exit), mean [seeds' range] | exit 1 (1, 7) (walled in) | exit 2 (6, 1) |"
    assert lines[9] == "| inbound teleporter 1 | 2.0 [1.0-3.0] | 3.0 [2.0-4.0] |"
    record["walk_cells"] = [10, 11, 12, 13, 14]
    for n, s in enumerate(record["per_seed"]):
        s["learned"]["start_to_goal"] = [n * 10.0, 20.0, 30.0, 40.0, 50.0]
    (tmp_path / "r" / "results.json").write_text(json.dumps(record))
    lines = render_page(page).split("\n")
    assert lines[13:15] == ["| the maze's walk, no teleporter entered (cells) | 10 | 11 | 12 | 13 | 14 |",
                            "| learned d(start, goal), mean [seeds' range] | 5.0 [0.0-10.0] | 20.0 [20.0-20.0] | "
                            "30.0 [30.0-30.0] | 40.0 [40.0-40.0] | 50.0 [50.0-50.0] |"]
    page.write_text("<!-- rendered: ogbench_teleport r/results.json r/results.json -->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="ogbench_teleport needs one record"):
        render_page(page)


def test_device_loop_learning_averages_the_last_evaluations_per_seed_then_over_seeds(tmp_path):
    from platonic_rl.benchmarks.device_loop import FINAL_EVALUATIONS

    early = [[0.0, 0.0]] * 3
    last = lambda a, b: early + [[a, b]] * FINAL_EVALUATIONS  # noqa: E731  (per seed: a and b at the end)
    learning = {"umaze/qrl": dict(success=last(0.8, 0.6), critic_check=dict(actor=[0.5, 0.7], critic_alone=[0.1, 0.3])),
                "umaze/crl": dict(success=last(1.0, 1.0))}
    records = {"a": dict(learning=learning),
               "b": dict(learning={"umaze/qrl": dict(success=last(0, 0), policy_success=dict(
                   graph_waypoints=last(0.9, 0.7)))}),
               "c": dict(learning={"umaze/qrl": dict(success=last(0.5, 0.5), policy_success=dict(
                   graph_waypoints_rest=last(1.0, 0.8)))})}
    _write_records(tmp_path, **records)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: device_loop_learning a/results.json b/results.json c/results.json\n"
                    "the umaze | umaze\n-->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    assert lines[5] == ("| the umaze | 0.70 ± 0.10 | 0.80 ± 0.10; at rest 0.90 ± 0.10 (its agent: 0.50 ± 0.00, 2 seeds) "
                        "| 1.00 ± 0.00 |  | 0.60 / 0.20 |")
    page.write_text("<!-- rendered: device_loop_learning a/results.json -->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="device_loop_learning needs three records"):
        render_page(page)


def test_fetch_success_prints_each_records_finals_and_bolds_a_single_leader(tmp_path):
    def record(name, seeds, steps, **finals):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(dict(
            args=dict(seeds=list(range(seeds)), env_steps=steps),
            summary={agent: dict(final_success=v) for agent, v in finals.items()})))

    record("a", 3, 20000, qrl=0.9516, crl=0.5, ddpg_her=0.25, zero_action=0.024)
    record("b", 1, 40500, qrl=0.044, crl=0.044)   # a tie: nothing bold
    record("c", 1, 56000, qrl=0.132)              # one agent: nothing to lead
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: fetch_success a/results.json b/results.json c/results.json\nReach\nPush\nImages\n"
                    "-->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    assert lines[5:10] == ["| task | seeds, env steps | QRL | Contrastive RL | DDPG+HER | zero action |",
                           "|---|---|---|---|---|---|",
                           "| Reach | 3, 20k | **0.952** | 0.500 | 0.250 | 0.024 |",
                           "| Push | 1, 40,500 | 0.044 | 0.044 |  |  |",
                           "| Images | 1, 56k | 0.132 |  |  |  |"]
    page.write_text("<!-- rendered: fetch_success a/results.json b/results.json\nReach\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="fetch_success needs one row label per record"):
        render_page(page)


def test_dmc_device_sets_each_loops_seeds_beside_their_mean_and_the_measured_rates(tmp_path):
    rate = lambda host, device: dict(host_env_steps_per_second=host, device_env_steps_per_second=device,  # noqa: E731
                                     device_over_host=device / host)
    device = dict(args=dict(seeds=[0, 1]),
                  learning={"noiseless dreamer": dict(final={"0": 100.0, "1": 300.0})},
                  throughput={"Dreamer, noiseless": rate(200.0, 250.0), "Denoised MDP, noiseless": rate(100.0, 90.0),
                              "Dreamer, twin": rate(10.0, 10.0), "Denoised MDP, twin": rate(20.0, 10.0)},
                  envs={"cheetah-run noiseless": {"host": 6608.6, "mjx x1": 2268.4, "mjx x8": 1000.0},
                        "cheetah-run twin": {"host": 1.0, "mjx x1": 1.0, "mjx x8": 1.0}})
    host = dict(summary=dict(noiseless=dict(dreamer=dict(returns=[10.0, 20.0]))))
    _write_records(tmp_path, device=device, host=host)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: dmc_device device/results.json host/results.json\nD | noiseless | dreamer\n-->\n"
                    "<!-- /rendered -->\n")
    assert render_page(page).split("\n")[3:9] == [
        "| | host loop (dm_control), seeds 0 / 1 | device loop (MJX), seeds 0 / 1 |", "|---|---|---|",
        "| D | 10.0 / 20.0 (15.0 ± 5.0) | 100.0 / 300.0 (200.0 ± 100.0) |",
        "| whole training, env steps/s, Dreamer / Denoised MDP, noiseless | 200 / 100 | 250 / 90 (1.25x / 0.90x) |",
        "| the same with the twin | 10 / 20 | 10 / 10 (1.00x / 0.50x) |",
        "| agent steps/s alone, noiseless, 1 env (host) / 1 / 8 envs (MJX): cheetah | 6,609 | 2,268 / 1,000 |"]
    page.write_text("<!-- rendered: dmc_device device/results.json host/results.json\nD | twin | dreamer\n-->\n"
                    "<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="no record holds dreamer on twin for both loops"):
        render_page(page)


def test_dmc_curves_lists_each_runs_evaluations_and_bolds_the_last(tmp_path):
    run = lambda variant, method, means, steps=(10000, 20000): dict(  # noqa: E731
        variant=variant, method=method, eval_steps=list(steps), eval_return=means, eval_return_std=[0.5, 1.25])
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(dict(runs=[run("noiseless", "dreamer", [1.0, 200.04]),
                                                                       run("twin", "dreamer", [3.0, 4.0], (1, 2))])))
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: dmc_curves a/results.json\nD | noiseless | dreamer\n-->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[3:6] == ["| run | 10k | 20k |", "|---|---|---|",
                                                  "| D | 1.0 ± 0.5 | **200.0 ± 1.2** |"]
    page.write_text("<!-- rendered: dmc_curves a/results.json\nD | noiseless | dreamer\nT | twin | dreamer\n-->\n"
                    "<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="must share their evaluation steps"):
        render_page(page)
    page.write_text("<!-- rendered: dmc_curves a/results.json\nD | noiseless | denoised\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="no run of denoised on noiseless"):
        render_page(page)


def test_mountaincar_scores_sets_each_score_beside_the_papers_and_dashes_what_a_method_has_not(tmp_path):
    nan = float("nan")
    record = dict(paper_table_4_1=dict(qrl_single=[97.69, None], qrl_multi=[95.89, 85.55]), results=dict(
        qrl_single=dict(summary=dict(top_of_hill=96.664, nine_states=None, spearman_top_of_hill=0.85204,
                                     spearman_nine_states_mean=nan)),
        qrl_multi=dict(summary=dict(top_of_hill=95.0, nine_states=89.925, spearman_top_of_hill=0.5,
                                    spearman_nine_states_mean=0.2125)),
        oracle_full=dict(summary=dict(top_of_hill=100.0, nine_states=99.9999))))
    _write_records(tmp_path, mc=record)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: mountaincar_scores mc/results.json -->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[3:6] == [
        "| QRL single-goal | 96.66 | 97.69 | – | – | 0.852 | – |",
        "| QRL multi-goal | 95.00 | 95.89 | 89.92 | 85.55 | 0.500 | 0.212 |",
        "| Oracle (full dynamics) | 100.00 | – | 100.00 | – |  |  |"]


def test_own_dataset_averages_seeds_and_critics_and_sets_the_policies_at_the_last_budget(tmp_path):
    row = lambda method, seed, u, success, **signals: dict(method=method, seed=seed, updates=u, success=success,  # noqa: E731
                                                            train_seconds=10.0 * (seed + 1) * u, **signals)
    methods = dict(args=dict(updates=[1, 3]), rows=[
        row("gcbc", 0, 1, 0.5), row("gcbc", 1, 1, 0.7), row("gcbc", 0, 3, 1.0, bc_nll=0.5),
        row("gcbc", 1, 3, 0.8, bc_nll=0.7),
        row("qrl", 0, 1, 0.2), row("qrl", 1, 1, 0.2), row("qrl", 0, 3, 0.9, **{"critic0/violation": 0.05,
                                                                               "critic1/violation": 0.07}),
        row("qrl", 1, 3, 0.9, **{"critic0/violation": 7.0, "critic1/violation": 8.0})])
    policies = dict(rows=[dict(method="qrl", updates=3, success=1.0, at_goal_at_end=0.5)],
                    policy_rows=[dict(policy="lookahead", success=0.25, at_goal_at_end=0.125)])
    _write_records(tmp_path, m=methods, p=policies)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: own_dataset m/results.json p/results.json\nG | gcbc\nQ | qrl\nacting | qrl / "
                    "lookahead\n-->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[5:10] == [
        "| method | 1 updates | 3 updates | seconds | BC NLL at 3 | violation at 3 |", "|---|---|---|---|---|---|",
        "| G | **0.60 ± 0.10** | 0.90 ± 0.10 | 30 | 0.60 | -- |",
        "| Q | 0.20 ± 0.00 | 0.90 ± 0.00 | 30 | -- | 3.8 |",
        "| acting |  | 1.00 (0.50) / 0.25 (0.12) | | | |"]
    page.write_text("<!-- rendered: own_dataset m/results.json p/results.json\nacting | hiql\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="no method or policy 'hiql'"):
        render_page(page)


def test_quasimetric_large_takes_the_best_of_each_rows_methods_per_record_and_bolds_the_lowest_mse(tmp_path):
    result = lambda mse, l1, inf: dict(test_mse=mse, l1_finite=l1, pred_infinite=inf)  # noqa: E731
    short = dict(scale=dict(large_steps=1500), large=dict(results={
        "iqe-sum": result(0.0242, 3.941, 50.8), "deepnorm": result(0.0300, 4.0, 60.0),
        "deepnorm-maxmean": result(0.0210, 4.07, 66.49), "asymdot": result(0.0854, 26716.4, 26589.7)}))
    long = dict(scale=dict(large_steps=6000), large=dict(results={"iqe-sum": result(0.0157, 3.36, 101.84)}))
    _write_records(tmp_path, a=short, b=long)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: quasimetric_large a/results.json b/results.json\nIQE | iqe-sum | IQE-sum\n"
                    "DN | deepnorm deepnorm-maxmean | DeepNorm\ndot | asymdot | Asym. dot product\n-->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[5:10] == [
        "| head | 1500 steps | 6000 steps | paper |", "|---|---|---|---|",
        "| IQE | 24.2 / 3.94 / 50.8 | **15.7 / 3.36 / 102** | 1.08 / 1.30 / 118 |",
        "| DN | **21.0 / 4.07 / 66.5** | – | 5.07 / 2.08 / 120 |",
        "| dot | 85.4 / 2.7e4 / 2.7e4 | – | 48.1 / 2.5e11 / 2.7e11 |"]
    page.write_text("<!-- rendered: quasimetric_large a/results.json\nX | iqe-sum | IQE\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="no paper row 'IQE'"):
        render_page(page)


def test_representations_groups_seeds_bolds_each_familys_best_and_marks_a_collapse(tmp_path):
    encoder = lambda family, param, accuracy, align, uniform: dict(  # noqa: E731
        family=family, param=param, accuracy=accuracy, align=align, uniform=uniform)
    record = dict(encoders=[encoder("align_uniform", 0.1, 0.2, 0.0, -1e-5), encoder("align_uniform", 0.1, 0.1, 0.0, 0.0),
                            encoder("align_uniform", 3.0, 0.9, 1.0, -3.0), encoder("align_uniform", 3.0, 1.0, 2.0, -3.5),
                            encoder("pixels", None, 0.978, 1.1, -1.2)],
                  summary=dict(best_align_uniform=dict(param=3.0)))
    _write_records(tmp_path, r=record)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: representations r/results.json -->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[3:6] == [
        "| align+uniform, w=0.1 | 0.150 ± 0.050 | 0.000 | -0.000 (collapsed) |",
        "| **align+uniform, w=3** | **0.950 ± 0.050** | 1.500 | -3.250 |",
        "| raw pixels | 0.978 | 1.100 | -1.200 |"]


def test_convergence_reads_the_final_and_untrained_snapshots_of_each_method(tmp_path):
    # entries: qrl seeds 0, 1 and crl seed 0, untrained (iteration 0) then trained (iteration 5)
    entries = [dict(method=m, seed=s, iteration=t, success=v) for t, values in ((0, (0.1, 0.3, 0.2)), (5, (0.7, 0.9, 0.4)))
               for (m, s), v in zip((("qrl", 0), ("qrl", 1), ("crl", 0)), values)]
    knn = [[1.0] * 6 for _ in range(6)]
    knn[3][4] = knn[4][3] = 0.8      # the trained qrl seeds with each other
    knn[3][5] = knn[5][3] = 0.5      # ... and with crl
    knn[4][5] = knn[5][4] = 0.7
    world = dict(geodesic=dict(mutual_knn=[0.2] * 3 + [0.4, 0.6, 0.1], cka=[0.5] * 6),
                 position=dict(mutual_knn=[0.0] * 6, cka=[0.9] * 3 + [0.8, 0.7, 0.3]))
    record = dict(scale=dict(snapshots=[0, 5]), envs=dict(umaze=dict(state=dict(
        entries=entries, mutual_knn=knn, world=world, summary=dict(methods=["qrl", "crl"])))))
    _write_records(tmp_path, c=record)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: convergence c/results.json -->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[3:5] == [
        "| umaze | state | QRL | 0.80 (0.20) | 0.800 (1.000) | 0.600 (1.000) | 0.500 (0.200) | 0.500 (0.500) "
        "| 0.750 (0.900) |",
        "| umaze | state | Contrastive RL | 0.40 (0.20) | nan (nan) | 0.600 (1.000) | 0.100 (0.200) | 0.500 (0.500) "
        "| 0.300 (0.900) |"]


def test_speed_summary_reads_the_report_its_compiled_profile_and_the_loops(tmp_path):
    update = lambda ms, one, scan: dict(ms_one_call=ms, peak_fraction_one_call=one, peak_fraction_in_scan=scan)  # noqa: E731
    profiled = lambda products, traced: dict(profile=dict(compiled=dict(products_ms=products, traced_ms=traced)))  # noqa: E731
    speed = dict(matmul_peak_gflops=212.4, iqe_share=dict(qrl_continuous=dict(fraction=0.128)), updates=dict(
        qrl_continuous=update(168.8, 0.649, 0.699), qrl=update(773.0, 0.794, 0.836),
        maze2d_qrl_w128_b256=update(11.84, 0.44, 0.46), dreamer_cpu=update(41.9, 0.314, 0.32),
        denoised_mdp_cpu=update(36.2, 0.289, 0.306)))
    compiled = dict(matmul_peak_gflops=183.2, updates=dict(qrl_continuous=profiled(104, 160), maze2d_qrl_w128_b256=
                                                           profiled(9.0, 18.0), denoised_mdp_cpu=profiled(38.5, 82.3)))
    loops = dict(matmul_peak_gflops=201.3, loops=dict(offline=dict(share_of_updates=0.9917),
                                                      device=dict(share_of_updates=0.9335)))
    _write_records(tmp_path, s=speed, c=compiled, l=loops)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: speed_summary s/results.json c/results.json l/results.json -->\n<!-- /rendered -->\n")
    lines = render_page(page).split("\n")
    assert lines[3:6] == ["| float32 matmul peak, measured in the run | 212 GFLOP/s |",
                          "| Fetch QRL update at C.3.3's size | 169 ms; 65% of the peak as one call, 70% in a scan; in "
                          "the compiled update its products take 65% of the steps' time (183 GFLOP/s) |",
                          "| discrete QRL update at C.3.1's size | 79% / 84% of the peak |"]
    assert lines[6].startswith("| maze2d `cpu` QRL update | 11.8 ms; 44% / 46% of the peak; in the compiled update its "
                               "products take 50% ")
    assert lines[8].startswith("| world-model updates at the `cpu` preset | 29%-31% of the peak;")
    assert lines[9].endswith("| 0.99 and 0.93 of their updates' rate alone |")


def test_dmc_returns_pools_named_records_seeds_ranges_probes_and_means_rows(tmp_path):
    run = lambda returns, probe=None: dict(returns=returns, probe={"x->distractor_state": probe or [float("nan")] * len(returns)})  # noqa: E731
    records = dict(d=dict(summary=dict(noiseless=dict(dreamer=run([100.0, 300.0])),
                                       twin=dict(dreamer=run([50.0], [0.7])))),
                   n=dict(summary=dict(twin=dict(denoised=run([80.0], [-0.2])))),
                   n1=dict(summary=dict(twin=dict(denoised=run([40.0], [0.1])))))
    _write_records(tmp_path, **records)
    page = tmp_path / "page.md"
    page.write_text("<!-- rendered: dmc_returns d=d/results.json n=n/results.json n1=n1/results.json\n"
                    "cheetah | noiseless | d:noiseless | -\ncheetah | twin | d:twin | n+n1:twin\n"
                    "cheetah | mean | mean 1 2\ncheetah | seed 0 | mean 1 2 seed=0\n-->\n<!-- /rendered -->\n")
    assert render_page(page).split("\n")[8:12] == [
        "| cheetah | noiseless | 200.0 ± 100.0 | - | - | - |",
        "|  | twin | 50.0 | 60.0 ± 20.0 | 0.70 | -0.20 to 0.10 |",
        "|  | mean | **125.0** | 60.0 | | |",
        "|  | seed 0 | 75.0 | **80.0** | | |"]
    page.write_text("<!-- rendered: dmc_returns d=d/results.json\ncheetah | twin | d:twin | d:twin\n-->\n<!-- /rendered -->\n")
    with pytest.raises(RenderError, match="record 'd' holds no denoised on 'twin'"):
        render_page(page)


def test_a_copy_of_the_suite_renders_the_readmes_statuses_from_its_own_results_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text("# Results\n\n## Alpha\n\n**Status: missed**\n")
    readme = tmp_path / "README.md"
    readme.write_text("<!-- rendered: statuses -->\n| benchmark | status |\n|---|---|\n"
                      "| [Alpha](docs/results.md#alpha) | met |\n<!-- /rendered -->\n")
    assert render_page(readme).split("\n")[3] == "| [Alpha](docs/results.md#alpha) | missed |"
    assert differences(tmp_path) == ["README.md:4: differs from its records (page: '| [Alpha](docs/results.md#alpha) "
                                     "| met |'; rendered: '| [Alpha](docs/results.md#alpha) | missed |')"]
