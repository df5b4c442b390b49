"""Random directed graphs (appendix B.4.2) and the quasimetric-learning benchmark's pieces."""
import collections
import dataclasses

import jax
import numpy as np
import pytest

from platonic_rl.benchmarks import quasimetric_learning as ql
from platonic_rl.envs import random_graphs as rg


def bfs_distances(adjacency):
    n = len(adjacency)
    out = np.full((n, n), np.inf)
    for s in range(n):
        out[s, s], queue = 0, collections.deque([s])
        while queue:
            u = queue.popleft()
            for v in np.flatnonzero(adjacency[u]):
                if out[s, v] == np.inf:
                    out[s, v] = out[s, u] + 1
                    queue.append(v)
    return out


def test_shortest_paths_match_python_bfs_and_are_a_quasimetric():
    graph = rg.random_graph(np.random.default_rng(0), 40, 0.1, 0.85, feature_dim=8, width=32)
    d = graph.distances
    np.testing.assert_array_equal(d, bfs_distances(graph.adjacency))
    assert (np.diag(d) == 0).all()
    assert np.isinf(d).any() and (d != d.T).any()  # unreachable pairs and asymmetry
    via = np.min(d[:, :, None] + d[None, :, :], axis=1)  # min_y d(x, y) + d(y, z)
    assert (d <= via).all()
    assert graph.features.shape == (40, 8)
    np.testing.assert_allclose(np.linalg.norm(graph.features, axis=1), 1.0, rtol=1e-5)


def test_edge_counts_follow_rho_un_and_rho_di():
    n, rho_un, rho_di = 60, 0.2, 0.5
    graph = rg.random_graph(np.random.default_rng(1), n, rho_un, rho_di, feature_dim=8, width=32)
    a = graph.adjacency
    connected_pairs = np.triu(a | a.T, 1).sum()
    one_way_pairs = np.triu(a ^ a.T, 1).sum()
    assert connected_pairs == round(rho_un * n * (n - 1) / 2)
    assert one_way_pairs == round(rho_di * connected_pairs)
    assert not np.diag(a).any()


def test_generation_is_seeded():
    a = rg.random_graph(np.random.default_rng(3), 30, 0.2, 0.5, feature_dim=8, width=32)
    b = rg.random_graph(np.random.default_rng(3), 30, 0.2, 0.5, feature_dim=8, width=32)
    np.testing.assert_array_equal(a.adjacency, b.adjacency)
    np.testing.assert_array_equal(a.features, b.features)


def test_landmark_split_is_disjoint_and_covers_both_directions():
    graph = rg.random_graph(np.random.default_rng(0), 30, 0.2, 0.5, feature_dim=8, width=32)
    train, test = rg.landmark_split(graph, np.random.default_rng(0), 3, 2)
    assert len(train) == 3 * 2 * 29 and len(test) == 2 * 2 * 29
    assert (train[:, 0] != train[:, 1]).all()
    assert len(set(np.unique(train)) & set(np.unique(test))) == 30  # every vertex is in both sets,
    landmarks = lambda pairs: {v for v in range(30) if (pairs == v).sum() == 2 * 29}  # noqa: E731
    assert not landmarks(train) & landmarks(test)
    with pytest.raises(ValueError, match="landmarks exceed"):
        rg.landmark_split(graph, np.random.default_rng(0), 20, 20)


def test_bad_graph_arguments():
    with pytest.raises(ValueError, match="rho_un"):
        rg.random_graph(np.random.default_rng(0), 10, 1.5, 0.5)
    with pytest.raises(ValueError, match="structure"):
        rg.make_graph("ring", 0)
    with pytest.raises(ValueError, match="square"):
        rg.shortest_paths(np.zeros((3, 4)))


def test_vmapped_training_learns_a_small_directed_graph():
    """IQE fits the discounted distances of a 40-vertex graph far better than its initialisation."""
    graph = rg.random_graph(np.random.default_rng(0), 40, 0.1, 0.85, feature_dim=64, width=32)
    n = graph.num_nodes
    targets = np.asarray(ql.discount(graph.distances)).ravel()[None]
    order = np.flatnonzero(~np.eye(n, dtype=bool).ravel()).astype(np.int32)[None]
    scale = dataclasses.replace(ql.PRESETS["quick"], steps=400, batch=128, lr=3e-3)
    keys = jax.random.split(jax.random.PRNGKey(0), 1)
    pred, curve = ql.train_on_graphs("iqe-sum", graph.features[None], targets, order,
                                     np.array([order.shape[1]], np.int32), keys, scale)
    assert pred.shape == (1, n, n)
    mse = np.mean((0.9 ** np.asarray(pred[0]).ravel()[order[0]] - targets[0][order[0]]) ** 2)
    assert curve[0, -1] < 0.3 * curve[0, 0]
    assert mse < 0.01
    np.testing.assert_allclose(np.diag(np.asarray(pred[0])), 0.0, atol=1e-5)


def test_unknown_method_is_rejected_and_the_default_heads_are_the_presets():
    with pytest.raises(ValueError, match=r"--methods: unknown heads \['iqe-summ'\]"):
        ql.Args(methods=("iqe-summ",))
    assert ql.Args().methods == ql.QUICK_METHODS and set(ql.QUICK_METHODS) < set(ql.METHODS)
    assert ql.Args(scale="cpu").methods == tuple(ql.METHODS)


@pytest.mark.slow
def test_quick_benchmark_end_to_end(tmp_path):
    record = ql.run(ql.Args(methods=("iqe-sum", "mlp+tri"), out_dir=str(tmp_path)))
    assert (tmp_path / "results.json").exists() and (tmp_path / "mse_vs_train_size.png").exists()
    assert set(record["large"]["results"]) == {"iqe-sum", "mlp+tri"}
