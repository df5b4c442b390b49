"""Pieces of benchmarks/representations.py: data, augmentation, objectives, and a tiny training run."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.benchmarks import representations as br


def test_digits_split_is_local_and_seeded():
    x_train, y_train, x_test, y_test = br.load_data(0)
    assert x_train.shape == (1200, 8, 8) and x_test.shape == (597, 8, 8)
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(y_train)) == set(range(10))
    np.testing.assert_array_equal(br.load_data(0)[0], x_train)


def test_augmentation_shifts_by_at_most_one_pixel():
    image = jnp.zeros((1, 8, 8)).at[0, 4, 4].set(1.0)
    views = jax.vmap(lambda k: br.augment(k, image))(jax.random.split(jax.random.PRNGKey(0), 200))
    assert views.shape == (200, 1, 64)
    peak = np.asarray(views[:, 0].argmax(-1))
    rows, cols = peak // 8, peak % 8
    kept = np.asarray(views[:, 0].max(-1)) > 0.5  # the pixel survived dropout
    assert (np.abs(rows[kept] - 4) <= 1).all() and (np.abs(cols[kept] - 4) <= 1).all()
    assert len(set(zip(rows[kept], cols[kept]))) == 9  # all 9 shifts occur
    np.testing.assert_array_equal(br.augment(jax.random.PRNGKey(1), image), br.augment(jax.random.PRNGKey(1), image))


@pytest.mark.slow  # ~10 s (two vmapped trainings); the objectives' values are tests/test_replearn.py's
def test_training_reduces_both_losses():
    x_train = br.load_data(0)[0]
    scale = dataclasses.replace(br.PRESETS["quick"], steps=60, seeds=1, batch=64)
    for family, param in (("align_uniform", 1.0), ("infonce", 0.2)):
        (_, losses), params = br.train_family(family, (param,), 1, x_train, scale, seed=0)
        losses = np.asarray(losses[0])
        assert losses.shape == (60,) and losses[-10:].mean() < losses[:5].mean(), family


def test_summary_reads_alignment_by_accuracy():
    encoders = [dict(family="align_uniform", param=1.0, accuracy=a) for a in (0.9, 0.8)] + \
               [dict(family="infonce", param=0.1, accuracy=a) for a in (0.95, 0.5)]
    alignment = np.array([[1, .6, .7, .1], [.6, 1, .5, .2], [.7, .5, 1, .1], [.1, .2, .1, 1]])
    s = br.summarise(encoders, alignment)
    assert s["best_infonce"]["accuracy"] == pytest.approx(0.725)
    assert s["alignment_within_top_quarter"] == pytest.approx(0.7)   # encoders 2 and 0
    assert s["alignment_within_bottom_quarter"] == pytest.approx(0.2)  # encoders 1 and 3
    # mean alignment to the others: .467, .433, .433, .133 vs accuracy .9, .8, .95, .5
    assert s["spearman_accuracy_vs_mean_alignment"] == pytest.approx(0.6325, abs=1e-3)


@pytest.mark.slow
def test_quick_benchmark_end_to_end(tmp_path):
    record = br.run(br.Args(out_dir=str(tmp_path)))
    assert (tmp_path / "alignment.png").exists() and (tmp_path / "align_uniform.png").exists()
    assert record["summary"]["best_infonce"]["accuracy"] > 0.85


def test_alignment_matrix_equals_mutual_knn_pair_by_pair():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(60, 8)).astype(np.float32)
    features = [base, base @ rng.normal(size=(8, 8)).astype(np.float32), rng.normal(size=(60, 64))]
    from platonic_rl.replearn import metrics

    matrix = br.alignment_matrix(features, k=5)
    assert np.array_equal(np.diag(matrix), np.ones(3)) and np.array_equal(matrix, matrix.T)
    for i in range(3):
        for j in range(i + 1, 3):
            assert matrix[i, j] == pytest.approx(float(metrics.mutual_knn(features[i], features[j], 5)), abs=0)
