"""replearn: objectives and alignment metrics against closed forms and brute-force references."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
from scipy.stats import ortho_group

from platonic_rl.replearn import metrics as rm
from platonic_rl.replearn import objectives as ro
from platonic_rl.replearn.probes import affine_explained, explained

# Compiled once per shapes (shared by the tests): op by op, each primitive was compiled on its own. Eager calls are
# left where eager behaviour is what a test checks (test_metrics_are_deterministic_and_jittable, bad input).
uniform_loss = jax.jit(ro.uniform_loss)
uniform_loss_two_view = jax.jit(ro.uniform_loss_two_view)
align_loss = jax.jit(ro.align_loss, static_argnames="alpha")
info_nce = jax.jit(ro.info_nce, static_argnames="direction")
binary_nce = jax.jit(ro.binary_nce)
pairwise_logits = jax.jit(ro.pairwise_logits, static_argnames="energy")
knn_indices = jax.jit(rm.knn_indices, static_argnames=("k", "normalized", "chunk"))
mutual_knn = jax.jit(rm.mutual_knn, static_argnames=("k", "normalize"))
cycle_knn = jax.jit(rm.cycle_knn, static_argnames=("k", "normalize"))
cka = jax.jit(rm.cka, static_argnames=("kernel", "unbiased", "normalize"))
cknna = jax.jit(rm.cknna, static_argnames=("k", "normalize"))
svcca = jax.jit(rm.svcca, static_argnames="normalize")


def sphere(rng, n, d):
    x = rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# --- alignment and uniformity ------------------------------------------------------------------------

def test_uniformity_of_the_uniform_sphere_approaches_the_closed_form():
    d, t = 3, 2.0
    closed = -2 * t + math.log(math.gamma(d / 2) * t ** (1 - d / 2) * scipy.special.iv(d / 2 - 1, 2 * t))
    assert closed == pytest.approx(-2.0798, abs=1e-4)
    x = sphere(np.random.default_rng(0), 3000, d)
    assert float(uniform_loss(x, t)) == pytest.approx(closed, abs=0.02)
    # In high dimension it tends to -2t (all pairs nearly orthogonal: ||x - y||^2 -> 2).
    assert float(uniform_loss(sphere(np.random.default_rng(1), 1000, 512), t)) == pytest.approx(-2 * t, abs=0.05)


def test_uniformity_of_antipodal_pair_and_regular_simplex():
    t = 1.5
    x = jnp.array([[1.0, 0.0], [-1.0, 0.0]])
    assert float(uniform_loss(x, t)) == pytest.approx(-4 * t, abs=1e-5)
    n = 5  # regular simplex: centred standard basis of R^n, normalised
    simplex = np.eye(n) - 1.0 / n
    simplex /= np.linalg.norm(simplex, axis=1, keepdims=True)
    assert float(uniform_loss(jnp.asarray(simplex, jnp.float32), t)) == pytest.approx(
        -t * (2 + 2 / (n - 1)), abs=1e-5)


def test_alignment_hand_computed_and_safe_gradient():
    x = jnp.array([[0.0, 0.0], [3.0, 4.0]])
    y = jnp.zeros((2, 2))
    assert float(align_loss(x, y, alpha=2)) == pytest.approx(12.5)
    assert float(align_loss(x, y, alpha=1)) == pytest.approx(2.5)
    grad = jax.jit(jax.grad(lambda a: ro.align_loss(a, y, alpha=1.0)))(x)
    assert np.isfinite(grad).all() and (grad[0] == 0).all()
    grad_u = jax.jit(jax.grad(lambda a: ro.uniform_loss(a, 2.0)))(jnp.ones((4, 3)))  # coincident points
    assert np.isfinite(grad_u).all()
    two_view = uniform_loss_two_view(x, x + 1, 2.0)
    assert float(two_view) == pytest.approx(float(uniform_loss(x, 2.0)), rel=1e-6)


# --- contrastive --------------------------------------------------------------------------------------

def test_info_nce_matches_numpy_reference_in_every_direction():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 6)).astype(np.float32)

    def ce(l):
        return np.mean(scipy.special.logsumexp(l, axis=1) - np.diag(l))

    assert float(info_nce(logits, "forward")) == pytest.approx(ce(logits), rel=1e-5)
    assert float(info_nce(logits, "backward")) == pytest.approx(ce(logits.T), rel=1e-5)
    assert float(info_nce(logits)) == pytest.approx((ce(logits) + ce(logits.T)) / 2, rel=1e-5)
    # Uninformative critic: log n.
    assert float(info_nce(jnp.zeros((8, 8)))) == pytest.approx(math.log(8), rel=1e-6)
    batched = info_nce(jnp.stack([logits, logits.T]), "forward")
    assert batched.shape == (2,)


def test_binary_nce_hand_computed():
    logits = jnp.array([[2.0, -1.0], [0.0, 1.0]])
    sp = lambda v: math.log1p(math.exp(v))  # noqa: E731
    expected = (sp(-2.0) + sp(-1.0) + sp(0.0) + sp(-1.0)) / 4
    assert float(binary_nce(logits)) == pytest.approx(expected, rel=1e-6)


def test_pairwise_logits_energies():
    x = jnp.array([[1.0, 0.0], [0.0, 2.0]])
    y = jnp.array([[3.0, 4.0]])
    np.testing.assert_allclose(pairwise_logits(x, y, "dot", 0.5), [[6.0], [16.0]])
    np.testing.assert_allclose(pairwise_logits(x, y, "cosine"), [[0.6], [0.8]], rtol=1e-6)
    np.testing.assert_allclose(pairwise_logits(x, y, "neg_l2"), [[-math.sqrt(20)], [-math.sqrt(13)]],
                               rtol=1e-6)
    assert np.isfinite(jax.jit(jax.grad(lambda a: ro.pairwise_logits(a, a, "neg_l2").sum()))(x)).all()


def test_objectives_reject_bad_input():
    with pytest.raises(ValueError, match="square"):
        ro.info_nce(jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match="temperature"):
        ro.pairwise_logits(jnp.ones((2, 2)), jnp.ones((2, 2)), temperature=0.0)
    with pytest.raises(ValueError, match="energy"):
        ro.pairwise_logits(jnp.ones((2, 2)), jnp.ones((2, 2)), energy="l1")
    with pytest.raises(ValueError, match="floating"):
        ro.uniform_loss(jnp.ones((3, 2), jnp.int32))
    with pytest.raises(ValueError, match="same shape"):
        ro.align_loss(jnp.ones((3, 2)), jnp.ones((4, 2)))


# --- metrics ------------------------------------------------------------------------------------------

def test_knn_indices_match_brute_force_argsort_with_chunking_and_ties():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(103, 4)), 0).astype(np.float32)  # many ties
    got = np.asarray(knn_indices(jnp.asarray(x), 7, normalized=False, chunk=16))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    ref = np.argsort(d, axis=1, kind="stable")[:, :7]  # stable: ties -> lower index first
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("metric", [rm.mutual_knn, rm.cka, rm.cknna, rm.lcs_knn, rm.edit_knn, rm.svcca])
def test_identical_features_score_one(metric):
    x = np.random.default_rng(1).normal(size=(200, 16)).astype(np.float32)
    assert float(jax.jit(metric)(x, x)) == pytest.approx(1.0, abs=1e-5)


def test_mutual_knn_of_independent_features_is_chance():
    rng = np.random.default_rng(2)
    n, k = 2000, 10
    scores = [float(mutual_knn(rng.normal(size=(n, 8)), rng.normal(size=(n, 8)), k)) for _ in range(2)]
    assert np.mean(scores) == pytest.approx(k / (n - 1), rel=0.2)


def test_rotated_features_align_fully_under_mutual_knn_and_cka():
    """A random rotation keeps every cosine similarity, hence every neighbour and the linear kernel."""
    x = np.random.default_rng(5).normal(size=(500, 12)).astype(np.float32)
    rotated = x @ ortho_group.rvs(12, random_state=1).astype(np.float32)
    assert float(mutual_knn(x, rotated, 10)) == pytest.approx(1.0, abs=1e-6)
    assert float(cka(x, rotated)) == pytest.approx(1.0, abs=1e-5)


def test_knn_from_distances_and_knn_overlap_match_brute_force():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(150, 3))
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    got = np.asarray(rm.knn_from_distances(jnp.asarray(d, jnp.float32), 5))
    masked = d + np.diag(np.full(150, np.inf))
    np.testing.assert_array_equal(got, np.argsort(masked, axis=1, kind="stable")[:, :5])
    # Neighbours under the Euclidean distances are knn_indices' (unnormalised); overlap of given lists = mutual_knn.
    y = x + 0.3 * rng.normal(size=x.shape)
    ny = rm.knn_indices(jnp.asarray(y, jnp.float32), 5, normalized=False)
    brute = np.mean([len(set(got[i]) & set(np.asarray(ny)[i])) / 5 for i in range(150)])
    assert float(rm.knn_overlap(got, ny)) == pytest.approx(brute)
    assert float(rm.knn_overlap(got, ny)) == pytest.approx(float(mutual_knn(x, y, 5, normalize=False)))
    with pytest.raises(ValueError, match="square"):
        rm.knn_from_distances(np.ones((4, 5)), 2)
    with pytest.raises(ValueError, match=r"shape \[n, k\]"):
        rm.knn_overlap(np.zeros((4, 2), int), np.zeros((4, 3), int))
    # Every two of many lists: the same overlaps, symmetric, ones on the diagonal
    nz = rm.knn_indices(jnp.asarray(rng.normal(size=x.shape), jnp.float32), 5, normalized=False)
    matrix = rm.knn_overlap_matrix([got, ny, nz])
    assert matrix[0, 1] == matrix[1, 0] == pytest.approx(float(rm.knn_overlap(got, ny)))
    assert matrix[1, 2] == pytest.approx(float(rm.knn_overlap(ny, nz))) and np.array_equal(np.diag(matrix), np.ones(3))
    with pytest.raises(ValueError, match="neighbours must hold at least one"):
        rm.knn_overlap_matrix([])


def test_kernel_cka_equals_linear_cka_and_reads_a_distance_kernel():
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(200, 6)), rng.normal(size=(200, 4))
    b = np.concatenate([a[:, :2], b], 1)
    assert float(rm.kernel_cka(a @ a.T, b @ b.T)) == pytest.approx(float(cka(a, b, normalize=False)), rel=1e-4)
    # -1/2 of squared Euclidean distances is, once centred, the linear kernel of the centred points (classical MDS).
    squared = ((a[:, None] - a[None]) ** 2).sum(-1)
    assert float(rm.kernel_cka(-0.5 * squared, a @ a.T)) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="square"):
        rm.kernel_cka(np.ones((3, 4)), np.ones((3, 4)))


def test_mutual_and_cycle_knn_hand_computed():
    # Points on a line: neighbours are unambiguous.
    a = jnp.array([[0.0], [1.0], [3.0], [7.0]])
    b = jnp.array([[0.0], [1.0], [7.0], [3.0]])  # swaps the roles of samples 2 and 3
    na = np.asarray(knn_indices(a, 1, normalized=False))[:, 0]
    np.testing.assert_array_equal(na, [1, 0, 1, 2])
    # k=1 neighbours in b: [1, 0, 3, 1]; overlap with a's [1, 0, 1, 2] at samples 0, 1.
    assert float(mutual_knn(a, b, 1, normalize=False)) == pytest.approx(0.5)
    # cycle: i -> N_a(i) = j -> is i = N_b(j)?  0->1->0 yes, 1->0->1 yes, 2->1->0 no, 3->2->3 yes.
    assert float(cycle_knn(a, b, 1, normalize=False)) == pytest.approx(0.75)


def _levenshtein(x, y):
    """Brute-force recurrence on tuples."""
    if not x or not y:
        return len(x) + len(y)
    return min(_levenshtein(x[1:], y) + 1, _levenshtein(x, y[1:]) + 1,
               _levenshtein(x[1:], y[1:]) + (x[0] != y[0]))


def test_lcs_and_edit_distance_dynamic_programs():
    lcs_length, edit_distance = jax.jit(rm._lcs_length), jax.jit(rm._edit_distance)
    s, t = jnp.array([1, 2, 3, 4, 5]), jnp.array([2, 1, 3, 5, 9])
    assert int(lcs_length(s, t)) == 3      # e.g. 1 3 5
    assert int(edit_distance(s, t)) == 4   # 4 substitutions (no shorter insert/delete route)
    assert int(edit_distance(s, s)) == 0 and int(lcs_length(s, s)) == 5
    rng = np.random.default_rng(0)
    for _ in range(8):
        x, y = rng.integers(0, 4, size=(2, 5))
        assert int(edit_distance(jnp.asarray(x), jnp.asarray(y))) == _levenshtein(tuple(x), tuple(y))


def test_linear_cka_invariances_and_numpy_reference():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 10))
    y = x @ rng.normal(size=(10, 10)) + 0.5 * rng.normal(size=(300, 10))
    base = float(cka(x, y, normalize=False))

    def numpy_cka(a, b):
        h = np.eye(len(a)) - 1 / len(a)
        k, l = h @ a @ a.T @ h, h @ b @ b.T @ h
        return np.sum(k * l) / np.sqrt(np.sum(k * k) * np.sum(l * l))

    assert base == pytest.approx(numpy_cka(x, y), rel=1e-4)
    q = ortho_group.rvs(10, random_state=0)
    assert float(cka(x @ q, y, normalize=False)) == pytest.approx(base, rel=1e-4)
    assert float(cka(3.7 * x + 5.0, y, normalize=False)) == pytest.approx(base, rel=1e-4)
    general = np.diag(np.geomspace(0.05, 20, 10))
    assert abs(float(cka(x @ general, y, normalize=False)) - base) > 0.01
    # The feature-space unbiased form equals the kernel-space U-centred estimator.
    ka, kb = rm._u_center(jnp.asarray(x @ x.T, jnp.float32)), rm._u_center(jnp.asarray(y @ y.T, jnp.float32))
    kernel_form = float(jnp.sum(ka * kb) / jnp.sqrt(jnp.sum(ka * ka) * jnp.sum(kb * kb)))
    assert float(cka(x, y, unbiased=True, normalize=False)) == pytest.approx(kernel_form, rel=1e-3)


def test_cknna_with_all_neighbours_equals_unbiased_cka():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(120, 8))
    y = np.tanh(x @ rng.normal(size=(8, 6))) + 0.3 * rng.normal(size=(120, 6))
    assert float(cknna(x, y, k=119)) == pytest.approx(float(cka(x, y, unbiased=True)), rel=1e-4)
    assert float(cknna(x, x, k=10)) == pytest.approx(1.0, abs=1e-6)


def _numpy_cka(a, b, unbiased):
    """float64 kernel-space reference: centred (biased) or U-centred (unbiased) linear kernels."""
    n = len(a)

    def center(k):
        if not unbiased:
            h = np.eye(n) - 1 / n
            return h @ k @ h
        k = k * (1 - np.eye(n))
        u = k - k.sum(1, keepdims=True) / (n - 2) - k.sum(0, keepdims=True) / (n - 2) + k.sum() / ((n - 1) * (n - 2))
        return u * (1 - np.eye(n))

    k, l = center(a @ a.T), center(b @ b.T)
    return np.sum(k * l) / np.sqrt(np.sum(k * k) * np.sum(l * l))


@pytest.mark.parametrize("unbiased", [False, True])
def test_cka_on_uncentred_float32_features_matches_float64_reference(unbiased):
    """CKA is translation invariant; a large common offset used to cancel catastrophically in float32
    (unbiased: 0.738 instead of 0.439 at offset 10, NaN at 30). Float32 inputs, float64 reference: the
    centred features keep every product at the data's own scale, so agreement is to ~1e-5 absolute."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 32))
    b = a @ rng.normal(size=(32, 32)) / 32 ** .5 + rng.normal(size=(200, 32))
    base = float(cka(np.float32(a), np.float32(b), unbiased=unbiased, normalize=False))
    assert base == pytest.approx(_numpy_cka(a, b, unbiased), abs=1e-5)
    for offset in (10.0, 30.0, 1000.0):
        x, y = np.float32(a + offset), np.float32(b + offset)
        # normalize=False: the statistic must not move with the offset.
        assert float(cka(x, y, unbiased=unbiased, normalize=False)) == pytest.approx(base, abs=2e-5)
        # normalize=True (default): features are L2-normalised first, which is not translation invariant,
        # so compare with the float64 reference on the same normalised float32 features.
        xn = np.float64(x) / np.linalg.norm(np.float64(x), axis=1, keepdims=True)
        yn = np.float64(y) / np.linalg.norm(np.float64(y), axis=1, keepdims=True)
        tol = 2e-5 if offset < 100 else 1e-4  # at 1000 the normalised float32 rows keep less of their spread
        assert float(cka(x, y, unbiased=unbiased)) == pytest.approx(_numpy_cka(xn, yn, unbiased), abs=tol)
    # Hand-checked numbers: offset 10, normalised, unbiased -> 0.4388, equal to CKNNA with every neighbour.
    if unbiased:
        x, y = np.float32(a + 10), np.float32(b + 10)
        assert float(cka(x, y, unbiased=True)) == pytest.approx(0.43877, abs=1e-4)
        assert float(cknna(x, y, k=199)) == pytest.approx(float(cka(x, y, unbiased=True)), abs=1e-5)


def test_rbf_cka_is_translation_invariant_in_float32():
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=(150, 5)), rng.normal(size=(150, 5))
    b[:, :3] = a[:, :3]
    base = float(rm.cka(np.float32(a), np.float32(b), kernel="rbf", normalize=False))
    for offset in (30.0, 1000.0):
        shifted = float(rm.cka(np.float32(a + offset), np.float32(b + offset), kernel="rbf", normalize=False))
        assert shifted == pytest.approx(base, abs=1e-4)


def test_rbf_cka_and_svcca_behave():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 6))
    q = ortho_group.rvs(6, random_state=1)
    assert float(rm.cka(x, x @ q, kernel="rbf", normalize=False)) == pytest.approx(1.0, abs=1e-5)
    assert float(rm.cka(x, rng.normal(size=(200, 6)), kernel="rbf")) < 0.2
    # SVCCA is invariant to any invertible linear map.
    assert float(svcca(x, x @ rng.normal(size=(6, 6)), normalize=False)) == pytest.approx(1.0, abs=1e-4)


def test_metrics_are_deterministic_and_jittable():
    x = np.random.default_rng(6).normal(size=(64, 5)).astype(np.float32)
    y = np.random.default_rng(7).normal(size=(64, 5)).astype(np.float32)
    for metric in (rm.mutual_knn, rm.cycle_knn, rm.cknna):
        first = float(metric(x, y))
        assert float(metric(x, y)) == first
        assert float(jax.jit(metric, static_argnums=2)(x, y, 10)) == pytest.approx(first)
    for kernel, unbiased in (("linear", False), ("rbf", False), ("rbf", True)):  # the RBF bandwidth's median too
        eager = float(rm.cka(x, y, kernel=kernel, unbiased=unbiased))
        jitted = jax.jit(rm.cka, static_argnames=("kernel", "unbiased"))(x, y, kernel=kernel, unbiased=unbiased)
        assert float(jitted) == pytest.approx(eager, rel=1e-5, abs=1e-6)
    assert float(jax.jit(rm.svcca)(x, y)) == pytest.approx(float(rm.svcca(x, y)), rel=1e-5)


def test_metrics_reject_bad_input():
    with pytest.raises(ValueError, match="same samples"):
        rm.mutual_knn(np.ones((10, 3)), np.ones((11, 3)))
    with pytest.raises(ValueError, match="k must be"):
        rm.mutual_knn(np.ones((10, 3)), np.ones((10, 3)), k=10)
    with pytest.raises(ValueError, match=r"shape \[n, d\]"):
        rm.cka(np.ones(10), np.ones(10))
    with pytest.raises(ValueError, match=r"knn_indices: x must have shape \[n, d\]"):
        rm.knn_indices(np.ones(10), 3)
    with pytest.raises(ValueError, match="kernel"):
        rm.cka(np.ones((10, 3)), np.ones((10, 3)), kernel="poly")


def test_ridge_probe_r2_reads_out_linear_targets_and_not_noise():
    from platonic_rl.replearn.probes import ridge_probe_r2

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5))
    w = rng.normal(size=(5, 3))
    y = x @ w
    assert ridge_probe_r2(x[:400], y[:400], x[400:], y[400:], alpha=1e-3) > 0.999
    noise = rng.normal(size=(600, 2))
    assert abs(ridge_probe_r2(x[:400], noise[:400], x[400:], noise[400:])) < 0.05
    assert np.isnan(ridge_probe_r2(x[:400], np.zeros((400, 0)), x[400:], np.zeros((200, 0))))
    with pytest.raises(ValueError, match="same K"):
        ridge_probe_r2(x[:400], y[:400], x[400:, :4], y[400:])
    # Cross-validated strength: many useless features, few rows -> strong regularisation beats alpha ~ 0.
    wide = rng.normal(size=(120, 100))
    target = wide[:, :1] + 0.5 * rng.normal(size=(120, 1))
    groups = np.repeat(np.arange(4), 20)
    cv = ridge_probe_r2(wide[:80], target[:80], wide[80:], target[80:], alpha=None, groups=groups)
    assert cv > ridge_probe_r2(wide[:80], target[:80], wide[80:], target[80:], alpha=1e-2) + 0.1
    with pytest.raises(ValueError, match="groups"):
        ridge_probe_r2(x[:400], y[:400], x[400:], y[400:], alpha=None)


def test_explained_is_the_r2_of_a_prediction_as_it_is():
    target = np.array([0.0, 1.0, 2.0, 3.0])  # variance sum 5
    assert explained(target, target) == 1.0 and explained(target, np.full(4, 1.5)) == 0.0
    assert explained(target, np.ones(4)) == pytest.approx(1 - 6 / 5)  # errors 1, 0, 1, 4


def test_affine_explained_ignores_a_constant_and_a_positive_scale_but_not_the_sign():
    target = np.array([0.0, 1.0, 2.0, 3.0])
    shifted = 2.0 * target + 5.0  # a constant moved into the other head, and a scale
    assert explained(target, shifted) < -10 and affine_explained(target, shifted) == pytest.approx(1.0)
    assert affine_explained(target, -shifted) == pytest.approx(-1.0)
    assert affine_explained(target, np.full(4, 7.0)) == 0.0
    # [0, 1, 0, 1] against 0..3: covariance 1, sums of squares 5 and 1, so r^2 = 1 / 5
    assert affine_explained(target, np.array([0.0, 1.0, 0.0, 1.0])) == pytest.approx(0.2)
