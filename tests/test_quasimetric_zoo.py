"""The quasimetric model zoo: every registered head, checked against its claims and closed forms."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from platonic_rl.qrl import quasimetrics as qm

DIM = 32
QUASIMETRIC = [n for n in qm.HEADS if qm.make_head(n).is_quasimetric]
NON_QUASIMETRIC = [n for n in qm.HEADS if not qm.make_head(n).is_quasimetric]


def _init(name, seed=0, **kwargs):
    kwargs = {"dim_per_component": 8, **kwargs} if name.startswith("iqe") else kwargs
    head = qm.make_head(name, **kwargs)
    return head, _init_params(head, seed)


# Compiled once per head (heads are hashable): op by op, each primitive was compiled on its own.
@functools.partial(jax.jit, static_argnums=0)
def _init_params(head, seed):
    return head.init(jax.random.PRNGKey(seed), jnp.zeros((1, DIM)), jnp.zeros((1, DIM)))


def _triples(seed, n=512):
    """Random triples at several scales, with ties and points on segments (near-tight triangles)."""
    rng = np.random.default_rng(seed)
    x, y, z = (rng.normal(size=(n, DIM)) * rng.choice([0.1, 1.0, 5.0], size=(n, 1)) for _ in range(3))
    y[: n // 8] = x[: n // 8]                                   # d(x, y) = 0
    y[n // 8: n // 4] = 0.5 * (x[n // 8: n // 4] + z[n // 8: n // 4])  # y between x and z
    z[n // 4: n // 4 + 16] = np.round(z[n // 4: n // 4 + 16])   # ties across coordinates
    return tuple(jnp.asarray(a, jnp.float32) for a in (x, y, z))


def test_registry_flags_match_the_paper_families():
    assert set(NON_QUASIMETRIC) == {"mlp", "asymdot"}
    for name in ("l2", "l1", "spherical"):
        assert qm.make_head(name).is_symmetric
    for name in ("iqe-sum", "mrn", "pqe-lh", "pqe-gg", "deepnorm", "widenorm"):
        assert not qm.make_head(name).is_symmetric


@pytest.mark.parametrize("name", QUASIMETRIC)
def test_quasimetric_axioms_for_every_head(name):
    """Seeded random search over inits and triples: d(x,x)=0, d>=0, d(x,z) <= d(x,y) + d(y,z)."""
    apply = None
    for seed in range(3):
        head, params = _init(name, seed)
        apply = apply or jax.jit(head.apply)
        d = lambda a, b: apply(params, a, b)  # noqa: E731
        x, y, z = _triples(seed)
        dxy, dyz, dxz = (np.asarray(v, np.float64) for v in (d(x, y), d(y, z), d(x, z)))
        scale = max(1.0, float(np.abs(dxz).max()))
        np.testing.assert_allclose(np.asarray(d(x, x)), 0.0, atol=1e-5 * scale)
        assert dxy.min() >= -1e-6 * scale, f"{name}: negative distance {dxy.min()}"
        violation = dxz - dxy - dyz
        assert violation.max() <= 1e-4 * scale, f"{name}: triangle violated by {violation.max()}"
        if not head.is_symmetric:
            assert np.abs(dxy - np.asarray(d(y, x))).max() > 1e-3 * scale, f"{name} is not asymmetric"


@pytest.mark.parametrize("name", NON_QUASIMETRIC)
def test_non_quasimetric_heads_are_flagged_and_do_violate(name):
    head, params = _init(name)
    assert head.is_quasimetric is False
    x, y, z = _triples(0)
    apply = jax.jit(head.apply)
    d = lambda a, b: np.asarray(apply(params, a, b))  # noqa: E731
    broken = (np.abs(d(x, x)).max() > 1e-3 or d(x, y).min() < 0
              or (d(x, z) - d(x, y) - d(y, z)).max() > 1e-3)
    assert broken, f"{name} is flagged non-quasimetric but satisfied every axiom on the random search"


@pytest.mark.parametrize("name", ["iqe-sum", "iqe-maxmean", "deepnorm", "widenorm", "l2", "l1"])
def test_positive_homogeneity_of_latent_heads(name):
    head, params = _init(name)
    x, y, _ = _triples(1)
    apply = jax.jit(head.apply)
    base = np.asarray(apply(params, x, y))
    for c in (0.25, 4.0):
        np.testing.assert_allclose(apply(params, c * x, c * y), c * base, rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(qm.HEADS))
def test_every_head_jits_vmaps_grads_on_any_leading_shape(name):
    head, params = _init(name)
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(size=(2, 3, DIM)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(3, DIM)), jnp.float32)  # broadcasts against x
    d = jax.jit(head.apply)(params, x, y)
    assert d.shape == (2, 3) and np.isfinite(d).all()
    vmapped = jax.jit(jax.vmap(head.apply, in_axes=(None, 0, None)))(params, x, y)
    np.testing.assert_allclose(vmapped, d, rtol=1e-5, atol=1e-5)
    grad = jax.jit(jax.grad(lambda p, a, b: head.apply(p, a, b).sum(), argnums=(0, 1, 2)))
    for a, b in ((x, jnp.broadcast_to(y, x.shape)), (x, x)):  # x == x: kinks of norms and relus
        grads = grad(params, a, b)
        assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(grads)), name
    assert qm.count_params(head, DIM) == sum(np.size(p) for p in jax.tree.leaves(params))


def test_parameter_counts_by_hand():
    assert qm.count_params(qm.make_head("iqe-sum", dim_per_component=8), 2048) == 0
    assert qm.count_params(qm.make_head("iqe-maxmean", dim_per_component=8), 2048) == 1
    assert qm.count_params(qm.make_head("l2"), 64) == 0
    # WideNorm: c * 2d * w weights (eq. B.191); + c * 9 concave parameters + 1 maxmean alpha.
    assert qm.count_params(qm.make_head("widenorm", num_components=4, component_dim=8), 16) == 4 * 32 * 8
    assert qm.count_params(qm.make_head("widenorm-maxmean", num_components=4, component_dim=8),
                           16) == 4 * 32 * 8 + 4 * 9 + 1
    # DeepNorm: n * d * w input matrices + (n - 1) * w^2 between layers.
    assert qm.count_params(qm.make_head("deepnorm", hidden=8, num_layers=3), 16) == 3 * 16 * 8 + 2 * 64


# --- PQE --------------------------------------------------------------------------------------------

def _poisson_le_reference(a, b):
    """Brute force sum_n P[Pois(b) = n] P[Pois(a) <= n] in float64."""
    n = np.arange(0, 2000)
    return np.array([np.sum(stats.poisson.pmf(n, bi) * stats.poisson.cdf(n, ai)) for ai, bi in zip(a, b)])


def test_poisson_le_prob_matches_brute_force_and_closed_forms():
    rng = np.random.default_rng(0)
    a = np.concatenate([[0.0, 0.0, 2.0, 1e-4], rng.exponential(4.0, 60), rng.uniform(50, 300, 8)])
    b = np.concatenate([[0.0, 3.0, 0.0, 1e-4], rng.exponential(4.0, 60), a[-8:] + rng.normal(0, 4, 8)])
    got = np.asarray(jax.jit(qm.poisson_le_prob)(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)))
    # float32 rounding, elementwise: ~eps per quadrature term (48 terms), plus the rounding of the inputs, the nodes
    # and sqrt(b), ~eps sqrt(rate), which the bump's slope carries into P (1.1e-6 seen at rate 285: a flat 2e-6 was
    # under the bound there, and on other CPUs it could be exceeded).
    bound = 2.0 ** -24 * (32 + 4 * np.sqrt(np.maximum(a, b)))
    error = np.abs(got - _poisson_le_reference(a, b))
    assert np.all(error <= bound), (error / bound).max()
    assert got[0] == 1.0 and got[1] == 1.0                 # Pois(0) = 0 <= anything
    assert got[2] == pytest.approx(math.exp(-2.0), abs=1e-6)  # P[Pois(2) = 0]


def test_poisson_le_prob_gradients_match_finite_differences():
    a = np.array([0.5, 3.0, 10.0, 2.0, 40.0])
    b = np.array([1.0, 3.0, 4.0, 1e-9, 37.0])
    ga, gb = jax.jit(jax.grad(lambda a, b: qm.poisson_le_prob(a, b).sum(), argnums=(0, 1)))(
        jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32))
    h = 1e-4
    ref_a = (_poisson_le_reference(a + h, b) - _poisson_le_reference(a - h, b)) / (2 * h)
    ref_b = (_poisson_le_reference(a, b + h) - _poisson_le_reference(a, b)) / h
    np.testing.assert_allclose(ga, ref_a, atol=1e-4)
    np.testing.assert_allclose(gb, ref_b, atol=1e-3)
    assert gb[3] == pytest.approx(a[3] * math.exp(-a[3]), rel=1e-3)  # dP/db -> a e^{-a} at b = 0


def test_gaussian_shape_rates_match_numerical_integration():
    u, v, var = 0.3, -1.1, 0.7
    grid = np.linspace(-30, 30, 600001)
    measure = stats.norm.pdf(grid, 0, math.sqrt(var))
    fu, fv = stats.norm.pdf(grid, u, 1.0), stats.norm.pdf(grid, v, 1.0)
    ref_uv = np.trapezoid(np.maximum(fu - fv, 0) * measure, grid)
    ref_vu = np.trapezoid(np.maximum(fv - fu, 0) * measure, grid)
    r_uv, r_vu = qm.gaussian_shape_rates(jnp.array(u), jnp.array(v), jnp.array(var))
    assert float(r_uv) == pytest.approx(ref_uv, abs=1e-6)
    assert float(r_vu) == pytest.approx(ref_vu, abs=1e-6)
    assert float(qm.gaussian_shape_rates(jnp.array(u), jnp.array(u), jnp.array(var))[0]) == 0.0


def test_pqe_lh_equals_its_formula_and_bases_start_in_range():
    head = qm.make_head("pqe-lh", dim_per_component=4, gamma=0.9)
    x, y, _ = _triples(2)
    params = jax.jit(head.init)(jax.random.PRNGKey(3), x, y)
    b = np.asarray(jax.jit(qm.DeepLinearMatrix(8, 1, 64, row_targets=lambda k: jnp.zeros(8)).apply)(
        {"params": params["params"]["bases"]}))[:, 0]
    weights = np.log1p(np.exp(-b)) / -math.log(0.9)
    rates = np.maximum(np.asarray(x) - np.asarray(y), 0).reshape(-1, 8, 4) / 4
    expected = (1 - np.exp(-rates.sum(-1))) @ weights
    np.testing.assert_allclose(jax.jit(head.apply)(params, x, y), expected, rtol=1e-5)
    # eq. B.172: prod_i sigmoid(b_i)^0.5 in [0.5, 0.75] at initialisation.
    assert 0.5 - 1e-5 <= np.prod(1 / (1 + np.exp(-b))) ** 0.5 <= 0.75 + 1e-5


def test_deep_linear_matrix_collapses_to_one_matrix():
    dln = qm.DeepLinearMatrix(5, 3, 16)
    params = dln.init(jax.random.PRNGKey(0))["params"]
    m = {k: np.asarray(v, np.float64) for k, v in params.items()}
    exact = m["m4"] @ m["m3"] @ m["m2"] @ m["m1"] + m["bias"]
    # float32 rounding bound of a matrix product chain (Higham, thm 3.5): |fl(M) - M| <= gamma_k |M4||M3||M2||M1|
    # elementwise, k = summed inner dimensions (16 + 16 + 16), gamma_k ~ k * 2^-24; plus the bias addition.
    # In any association order: the module computes m4 @ (m3 @ (m2 @ m1)).
    scale = np.abs(m["m4"]) @ np.abs(m["m3"]) @ np.abs(m["m2"]) @ np.abs(m["m1"]) + np.abs(m["bias"])
    bound = (48 + 1) * 2.0 ** -24 * scale
    error = np.abs(np.asarray(dln.apply({"params": params}), np.float64) - exact)
    assert np.all(error <= bound), (error / bound).max()
    # ...and the bound is tight enough to catch a wrong product (here, m2 left out).
    assert np.abs(m["m4"] @ m["m3"] @ m["m1"] + m["bias"] - exact).max() > 100 * bound.max()
    with pytest.raises(ValueError, match="hidden"):
        qm.DeepLinearMatrix(32, 32, 16).init(jax.random.PRNGKey(0))


# --- norms, concave activation, regulariser ----------------------------------------------------------

def test_concave_activation_is_concave_monotone_and_zero_at_zero():
    act = qm.ConcaveActivation()
    d = jnp.tile(jnp.linspace(0.0, 20.0, 401)[:, None], (1, 3))
    params = jax.jit(act.init)(jax.random.PRNGKey(0), d)
    f = np.asarray(jax.jit(act.apply)(params, d))
    np.testing.assert_allclose(f[0], 0.0, atol=1e-7)
    assert (np.diff(f, axis=0) > 0).all()
    # Second differences of float32 values (up to 24) on a float32 grid carry up to ~4 x 2 ulp of rounding noise
    # (3 ulp = 5.7e-6 seen on the nearly linear tail; 1e-5 was 5 ulp); a convex term of this size gives up to +5e-3.
    assert (np.diff(f, n=2, axis=0) <= 16 * np.spacing(np.abs(f).max())).all()


def test_triangle_regulariser_hand_computed():
    gamma = 0.5
    # d(x,z) = 3 > d(x,y) + d(y,z) = 1 + 1: relu(0.5^2 - 0.5^3) = 0.125 -> squared 0.015625.
    # A satisfied triple contributes 0, so the mean over the two is 0.0078125.
    value = qm.triangle_regulariser(jnp.array([1.0, 1.0]), jnp.array([1.0, 1.0]), jnp.array([3.0, 1.5]),
                                    gamma)
    assert float(value) == pytest.approx(0.0078125)


def test_metric_heads_hand_computed():
    x, y = jnp.array([1.0, 0.0]), jnp.array([0.0, 2.0])
    assert float(qm.l1(x, y)) == pytest.approx(3.0)
    assert float(qm.euclidean(x, y)) == pytest.approx(math.sqrt(5))
    assert float(qm.spherical(x, y)) == pytest.approx(math.pi / 2)
    assert float(qm.spherical(x, -x)) == pytest.approx(math.pi)


def test_bad_head_options_are_rejected():
    with pytest.raises(ValueError, match="bad options for quasimetric head 'mrn'"):
        qm.make_head("mrn", nope=1)
    with pytest.raises(ValueError, match="dim_per_component"):
        _init("pqe-lh", dim_per_component=5)
    with pytest.raises(ValueError, match="gamma"):
        _init("pqe-lh", gamma=1.0)
    with pytest.raises(ValueError, match="transform"):
        _init("mlp", transform="log")
