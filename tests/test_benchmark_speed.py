import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.benchmarks import speed
from platonic_rl.benchmarks.timing import matmul_flops


def test_matmul_flops_hand_counted():
    a, w = jnp.ones((4, 8)), jnp.ones((8, 16))
    assert matmul_flops(jax.make_jaxpr(jnp.matmul)(a, w)) == 2 * 4 * 8 * 16
    # The gradient of sum(a @ w) wrt w adds a^T g: one more product of the same size.
    grad = jax.make_jaxpr(jax.grad(lambda w: jnp.sum(a @ w)))(w)
    assert matmul_flops(grad) == 2 * (2 * 4 * 8 * 16)
    # A scan's body counts once per step; jit (pjit) bodies are entered.
    scanned = jax.make_jaxpr(lambda w: jax.lax.scan(lambda c, _: (jax.jit(jnp.matmul)(c, w[:, :8]), None), a, None,
                                                    length=3)[0])(w)
    assert matmul_flops(scanned) == 3 * 2 * 4 * 8 * 8
    # A batched dot: [2, 4, 8] x [2, 8, 16] is 2 * 4 * 16 outputs of 8 multiply-adds.
    assert matmul_flops(jax.make_jaxpr(jnp.matmul)(jnp.ones((2, 4, 8)), jnp.ones((2, 8, 16)))) == 2 * 128 * 8
    # A convolution: 8 x 8 x 4 outputs, each 3 x 3 x 3 multiply-adds; a cond counts its dearer branch.
    image, kernel = jnp.ones((1, 8, 8, 3)), jnp.ones((3, 3, 3, 4))
    conv = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",  # noqa: E731
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert matmul_flops(jax.make_jaxpr(conv)(image, kernel)) == 2 * 8 * 8 * 4 * 27
    branches = jax.make_jaxpr(lambda p, a, w: jax.lax.cond(p, lambda: a @ w, lambda: jnp.zeros((4, 16))))(True, a, w)
    assert matmul_flops(branches) == 2 * 4 * 8 * 16


def test_quick_run_saves_the_report(tmp_path):
    args = speed.Args(scale="quick", cases=("gcbc",), repeats=1, scan_length=2, iqe_pairs=64, out_dir=str(tmp_path))
    record = speed.run(args)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.speed")
    gcbc = saved["updates"]["gcbc"]
    assert gcbc["ms_one_call"] > 0 and gcbc["ms_in_scan"] > 0 and gcbc["matmul_gflops"] > 0
    assert gcbc["samples_per_s"] == pytest.approx(64 / (gcbc["ms_in_scan"] / 1e3))
    assert gcbc["peak_fraction_in_scan"] == pytest.approx(
        gcbc["matmul_gflops"] * 1e9 / (gcbc["ms_in_scan"] / 1e3) / (saved["matmul_peak_gflops"] * 1e9))
    # Every IQE kernel computes the same distances (the alternatives are exact too).
    assert set(record["iqe"]) == set(speed.IQE_KERNELS)
    assert all(r["max_abs_difference"] < 1e-5 for r in record["iqe"].values())
    assert "iqe_share" not in saved  # needs both QRL cases
    assert "| gcbc | tiny |" in saved["table"]
    assert (tmp_path / "speed.png").stat().st_size > 10_000


def test_the_previous_and_sorting_kernels_match_the_library_with_ties():
    rng = np.random.default_rng(0)
    x, y = (np.round(rng.normal(size=(2, 32, 16)) * 2) / 2).astype(np.float32)
    reference = np.asarray(speed.qm.iqe_components(x, y, 8))
    for kernel in (speed.iqe_float_pairs, speed.iqe_sort):
        np.testing.assert_allclose(np.asarray(kernel(x, y, 8)), reference, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="--cases: unknown"):
        speed.run(speed.Args(scale="quick", cases=("nope",)))
    with pytest.raises(ValueError, match="--repeats must be >= 1"):
        speed.Args(repeats=0)
    with pytest.raises(ValueError, match="--parts must name some of updates, loops, graph"):
        speed.Args(parts=())
    with pytest.raises(ValueError, match="--graph-sizes must be waypoint counts >= 2"):
        speed.Args(graph_sizes=(1000, 1))


def test_the_graph_part_times_both_steps_of_the_graph_per_size(tmp_path):
    saved = speed.run(speed.Args(scale="quick", parts=("graph",), repeats=1, out_dir=str(tmp_path)))
    assert [r["waypoints"] for r in saved["graph"]] == [50, 100] and saved["updates"] == {}
    for r in saved["graph"]:
        assert r["paths_mb"] == 4 * r["waypoints"] ** 2 / 1e6 and 0 < r["edges_fraction"] <= 1
        assert f"| {r['waypoints']:,} | {r['distances_s']:.2f} | {r['paths_s']:.2f} |" in saved["table"]


@pytest.mark.slow
def test_the_loops_part_times_each_loop_against_its_updates_alone(tmp_path):
    saved = speed.run(speed.Args(scale="quick", parts=("loops",), repeats=1, out_dir=str(tmp_path)))
    assert saved["updates"] == {} and "iqe" not in saved
    for name in ("offline", "device"):
        loop = saved["loops"][name]
        assert loop["loop_updates_per_s"] > 0 and loop["updates_alone_per_s"] > 0
        assert loop["share_of_updates"] == pytest.approx(loop["loop_updates_per_s"] / loop["updates_alone_per_s"])
        assert f"| {name} | {loop['what']} |" in saved["table"]
    assert saved["loops"]["offline"]["share_of_fixed_batch"] > 0
    assert not (tmp_path / "speed.png").exists()  # the plot is of the updates


def test_iqe_kernel_swaps_the_head_kernel_and_restores_it():
    library = speed.qm.iqe_components
    x, y = np.random.default_rng(1).normal(size=(2, 4, 16)).astype(np.float32)
    with pytest.raises(RuntimeError):
        with speed.iqe_kernel("sort + cummax"):
            assert speed.qm.iqe_components is speed.iqe_sort
            np.testing.assert_allclose(speed.qm.iqe(x, y, 8, "sum"), speed.iqe_sort(x, y, 8).sum(-1), rtol=1e-6)
            raise RuntimeError  # restored on errors too
    assert speed.qm.iqe_components is library


@pytest.mark.slow
def test_world_model_parts_time_each_part_of_the_update():
    case = {c.name: c for c in speed.quick_cases()}["denoised_mdp"]
    agent, batch = case.build()
    parts = speed.world_model_parts(agent, jax.tree.map(jnp.asarray, batch), repeats=1)
    assert set(parts) == {"model_loss_and_gradient", "filtering_forward", "imagination_loss_and_gradient"}
    assert all(ms > 0 for ms in parts.values())


def test_matmul_eqns_list_each_product_with_its_count_and_their_flops_add_up():
    from platonic_rl.benchmarks.timing import eqn_flops, matmul_eqns, time_matmuls_alone

    a, w = jnp.ones((4, 8)), jnp.ones((8, 8))
    scanned = jax.make_jaxpr(lambda w: jax.lax.scan(lambda c, _: (jnp.tanh(c @ w) @ w, None), a, None,
                                                    length=3)[0] @ w)(w)
    eqns = matmul_eqns(scanned)
    assert sorted(count for _, count in eqns) == [1, 3, 3]
    assert sum(count * eqn_flops(eqn) for eqn, count in eqns) == matmul_flops(scanned) == 7 * 2 * 4 * 8 * 8
    assert time_matmuls_alone(scanned, repeats=1) > 0


def test_the_iqe_stand_in_sums_interval_lengths_the_union_only_where_they_are_disjoint():
    x = np.array([[0.0, 2.0, 0.0, 1.0]], np.float32)  # one component of 4 intervals [x, max(x, y)]
    disjoint = np.array([[1.0, 3.0, 0.0, 1.0]], np.float32)  # [0,1], [2,3], empty, empty
    overlapping = np.array([[3.0, 3.0, 0.0, 1.0]], np.float32)  # [0,3], [2,3]: union 3, lengths 4
    assert float(speed.iqe_no_union(x, disjoint, 4)[0, 0]) == float(speed.qm.iqe_components(x, disjoint, 4)[0, 0]) == 2
    assert float(speed.iqe_no_union(x, overlapping, 4)[0, 0]) == 4.0
    assert float(speed.qm.iqe_components(x, overlapping, 4)[0, 0]) == 3.0


@pytest.mark.slow  # ~15 s: compiles two tiny updates and their parts
def test_profile_parts_add_up_to_the_whole_and_only_iqe_heads_have_a_union_part():
    cases = {c.name: c.build() for c in speed.quick_cases()}
    qrl = speed.profile_update(*cases["qrl_continuous"], repeats=1)
    assert set(qrl["parts_ms"]) == {"matmuls", "optimiser", "iqe_union", "rest"}
    assert sum(qrl["parts_ms"].values()) == pytest.approx(qrl["whole_ms"])
    assert qrl["parts_ms"]["matmuls"] > 0 and qrl["parts_ms"]["optimiser"] > 0 and qrl["xla_gflop"] > 0
    l2 = speed.profile_update(*cases["qrl_continuous_l2"], repeats=1)
    assert "iqe_union" not in l2["parts_ms"] and l2["xla_mb_accessed"] > 0


def test_the_compiled_profile_times_each_instruction_and_finds_the_products():
    """A product and an elementwise tail XLA cannot fuse into it (a reduction over the product's other axis): the
    profiler's events are named after the compiled program's instructions, the one running the dot is marked as a
    product, the sums add up, and the sources name where in the program each instruction came from."""
    from platonic_rl.benchmarks.timing import compiled_groups, hlo_instructions, profile_compiled

    def f(a, b):
        return jnp.cumsum(jnp.tanh(a @ b), axis=0).sum()

    a, b = jnp.ones((128, 256)), jnp.ones((256, 128))
    text = jax.jit(f).lower(a, b).compile().as_text()
    instructions = hlo_instructions(text)
    assert any(i["products"] for i in instructions.values()) and not all(i["products"] for i in instructions.values())
    assert all(i["op"] != "dot" or i["products"] for i in instructions.values())
    profile = profile_compiled(f, (a, b), repeats=3)
    rows = profile["instructions"]
    assert rows and all(r["name"] in instructions and r["ms"] > 0 for r in rows)
    assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
    assert profile["products_ms"] > 0 and profile["other_ms"] > 0
    assert profile["products_ms"] + profile["other_ms"] == pytest.approx(profile["traced_ms"])
    assert profile["wall_ms"] > 0
    assert any("dot_general" in r["source"] for r in rows if r["products"])
    groups = compiled_groups(profile)
    assert groups and sum(ms for _, ms in groups) <= profile["other_ms"] + 1e-9


def test_source_groups_join_forward_and_backward_under_their_module():
    from platonic_rl.benchmarks.timing import source_group

    assert source_group("jit(update)/transpose(jvp(vmap(QuasimetricCritic.head_distance)))/head/and") == \
        source_group("jit(update)/jvp(vmap(QuasimetricCritic.head_distance))/head/max") == \
        "QuasimetricCritic.head_distance/head"
    assert source_group("jit(update)/jvp(vmap())/concatenate") == source_group("") == "(top level)"
