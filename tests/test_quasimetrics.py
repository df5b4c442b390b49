import jax
import jax.test_util  # noqa: F401  (check_grads)
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.qrl import quasimetrics as qm

# Compiled once per shapes (shared by the tests): op by op, each primitive was compiled on its own.
iqe_components = jax.jit(qm.iqe_components, static_argnames="dim_per_component")
iqe = jax.jit(qm.iqe, static_argnames=("dim_per_component", "reduction"))


def union_length(starts, ends):
    """Brute force: merge the intervals [s, max(s, e)] one by one."""
    intervals = sorted((s, max(s, e)) for s, e in zip(starts, ends) if max(s, e) > s)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


@pytest.mark.parametrize("round_to", [None, 0.5])  # 0.5: many ties and touching intervals
def test_iqe_components_equal_brute_force_union_length(round_to):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2, 64, 4 * 8)).astype(np.float32)
    if round_to:
        x, y = np.round(x / round_to) * round_to, np.round(y / round_to) * round_to
    got = np.asarray(iqe_components(x, y, dim_per_component=8))
    assert got.shape == (64, 4)
    # float64 reference (float32 scalars would keep union_length in float32): the kernel's float32 sum of <= 16 signed
    # endpoints errs by <= 8 eps * sum|endpoints| <= 8e-6 here.
    x64, y64 = np.float64(x), np.float64(y)
    ref = np.array([[union_length(x64[b, 8 * c:8 * c + 8], y64[b, 8 * c:8 * c + 8]) for c in range(4)]
                    for b in range(64)])
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_iqe_hand_computed():
    # Component 1: [0, 2] U [1, 1] -> 2.  Component 2: [0, 1] U [3, 4] -> 2.  Component 3: y < x -> 0.
    x = jnp.array([0.0, 1.0, 0.0, 3.0, 5.0, 6.0])
    y = jnp.array([2.0, 0.5, 1.0, 4.0, 1.0, 2.0])
    np.testing.assert_allclose(iqe_components(x, y, 2), [2.0, 2.0, 0.0])
    assert float(iqe(x, y, 2, "sum")) == pytest.approx(4.0)
    # maxmean: alpha * max + (1 - alpha) * mean = 0.25 * 2 + 0.75 * 4/3 = 1.5
    assert float(iqe(x, y, 2, "maxmean", alpha=0.25)) == pytest.approx(1.5)
    # Asymmetric: d(y, x) measures U [y, max(y, x)].
    np.testing.assert_allclose(iqe_components(y, x, 2), [0.5, 0.0, 4.0 + 1.0 - 0.0])


def _random_heads():
    alpha = jax.nn.sigmoid(-1.0)
    return {
        "iqe-sum": lambda a, b: qm.iqe(a, b, 8, "sum"),
        "iqe-maxmean": lambda a, b: qm.iqe(a, b, 8, "maxmean", alpha),
        "l2": qm.euclidean,
    }


@pytest.mark.parametrize("name", ["iqe-sum", "iqe-maxmean", "l2"])
def test_quasimetric_axioms_on_random_triples(name):
    d = jax.jit(_random_heads()[name])
    rng = np.random.default_rng(1)
    x, y, z = (rng.normal(size=(4096, 32)).astype(np.float32) for _ in range(3))
    dxy, dyz, dxz = np.asarray(d(x, y)), np.asarray(d(y, z)), np.asarray(d(x, z))
    np.testing.assert_array_equal(np.asarray(d(x, x)), 0.0)
    assert (dxy >= 0).all() and (dxy > 0).mean() > 0.99
    assert np.all(dxz <= dxy + dyz + 1e-4)
    # Near-degenerate triples (the triangle inequality is tight-ish when y is between x and z).
    mid = 0.5 * (x + z)
    assert np.all(np.asarray(d(x, z)) <= np.asarray(d(x, mid)) + np.asarray(d(mid, z)) + 1e-4)


@pytest.mark.parametrize("name", ["iqe-sum", "iqe-maxmean", "l2"])
def test_positive_homogeneity(name):
    d = jax.jit(_random_heads()[name])
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(2, 256, 32)).astype(np.float32)
    for scale in (0.1, 3.0):
        np.testing.assert_allclose(d(scale * x, scale * y), scale * np.asarray(d(x, y)), rtol=1e-4, atol=1e-5)


def test_iqe_is_asymmetric_and_l2_symmetric():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(2, 256, 32)).astype(np.float32)
    heads = {name: jax.jit(head) for name, head in _random_heads().items()}
    assert np.abs(np.asarray(heads["iqe-sum"](x, y) - heads["iqe-sum"](y, x))).max() > 0.1
    np.testing.assert_allclose(heads["l2"](x, y), heads["l2"](y, x), rtol=1e-6)


@pytest.mark.parametrize("name", ["iqe-sum", "iqe-maxmean", "l2"])
def test_jit_vmap_grad_finite_including_x_equals_y(name):
    d = _random_heads()[name]
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(2, 16, 32)).astype(np.float32)
    x_ties = np.round(x)
    batched = jax.jit(jax.vmap(d))(x, y)
    # Another summation order (32 squares; 64 signed interval endpoints of size ~1-4): eps * k * sum|terms| / d <= 3e-6.
    np.testing.assert_allclose(batched, jax.jit(d)(x, y), rtol=1e-5)
    for a, b in ((x, y), (x, x), (x_ties, np.round(y))):
        ga, gb = jax.jit(jax.grad(lambda a, b: d(a, b).sum(), argnums=(0, 1)))(a, b)
        assert np.isfinite(ga).all() and np.isfinite(gb).all()
    # Gradient of the union length: +1 on right boundaries, -1 on left ones (hand check).
    if name == "iqe-sum":
        gx, gy = jax.jit(jax.grad(lambda a, b: qm.iqe(a, b, 2, "sum"), argnums=(0, 1)))(
            jnp.array([0.0, 1.0]), jnp.array([2.0, 3.0]))  # [0, 2] U [1, 3] = [0, 3]
        np.testing.assert_array_equal(gx, [-1.0, 0.0])
        np.testing.assert_array_equal(gy, [0.0, 1.0])


def _spaced_pairs(rng, batch, dim):
    """x, y whose 2 * dim entries per row are distinct multiples of 0.1: no two endpoints within 0.1."""
    values = np.stack([rng.permutation(np.arange(-dim, dim)) for _ in range(batch)]) * 0.1
    return values[:, :dim].astype(np.float32), values[:, dim:].astype(np.float32)


def test_iqe_gradient_equals_finite_differences_of_brute_force():
    rng = np.random.default_rng(5)
    x, y = _spaced_pairs(rng, batch=8, dim=16)
    weights = rng.normal(size=(8, 2)).astype(np.float32)  # one random weight per component
    gx, gy = jax.jit(jax.grad(lambda a, b: jnp.sum(weights * qm.iqe_components(a, b, 8)), argnums=(0, 1)))(x, y)

    def brute(a, b):  # float64, merge-based, independent of the kernel
        return sum(weights[r, c] * union_length(a[r, 8 * c:8 * c + 8], b[r, 8 * c:8 * c + 8])
                   for r in range(8) for c in range(2))

    h = 0.01  # < half the 0.1 spacing: no step crosses a kink, so central differences are exact up to rounding
    x64, y64 = np.float64(x), np.float64(y)
    for got, arg in ((gx, 0), (gy, 1)):
        fd = np.zeros_like(x64)
        for r, c in np.ndindex(*x.shape):
            plus, minus = [x64.copy(), y64.copy()], [x64.copy(), y64.copy()]
            plus[arg][r, c] += h
            minus[arg][r, c] -= h
            fd[r, c] = (brute(*plus) - brute(*minus)) / (2 * h)
        assert set(np.unique(np.round(fd / np.abs(weights).max(), 6))) != {0.0}  # some entries move the union
        np.testing.assert_allclose(np.asarray(got), fd, atol=1e-9 + 1e-6 * np.abs(weights).max())


def test_iqe_forward_and_reverse_mode_agree():
    x, y = _spaced_pairs(np.random.default_rng(6), batch=4, dim=16)
    f = jax.jit(lambda a, b: qm.iqe(a, b, 8, "maxmean", 0.3))
    jax.test_util.check_grads(f, (x, y), order=1, modes=("fwd", "rev"), eps=0.01)


def test_iqe_negative_zero_touches_positive_zero():
    # [-1.5, -0.0] and [+0.0, 1] touch: one segment [-1.5, 1], whose boundaries are x[0] and y[1] only.
    x = jnp.array([-1.5, 0.0])
    y = jnp.array([-0.0, 1.0])
    assert float(iqe(x, y, 2, "sum")) == pytest.approx(2.5)
    gx, gy = jax.jit(jax.grad(lambda a, b: qm.iqe(a, b, 2, "sum"), argnums=(0, 1)))(x, y)
    np.testing.assert_array_equal(gx, [-1.0, 0.0])
    np.testing.assert_array_equal(gy, [0.0, 1.0])


def test_any_leading_shape_and_broadcast():
    x = jnp.ones((2, 3, 32))
    assert iqe(x, jnp.zeros(32), 8, "sum").shape == (2, 3)
    assert jax.jit(qm.euclidean)(x, jnp.zeros((3, 32))).shape == (2, 3)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="dim_per_component"):
        qm.iqe_components(jnp.ones(30), jnp.ones(30), 8)
    with pytest.raises(ValueError, match="last dimension"):
        qm.iqe(jnp.ones(32), jnp.ones(16), 8, "sum")
    with pytest.raises(ValueError, match="alpha"):
        qm.iqe(jnp.ones(32), jnp.ones(32), 8, "maxmean")
    with pytest.raises(ValueError, match="reduction"):
        qm.iqe(jnp.ones(32), jnp.ones(32), 8, "mean")
    with pytest.raises(ValueError, match="unknown quasimetric head"):
        qm.make_head("nope")


def test_linen_modules():
    head = qm.make_head("iqe", dim_per_component=8, reduction="maxmean")
    x, y = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 32))  # non-empty intervals: d > 0
    params = jax.jit(head.init)(jax.random.PRNGKey(0), x, y)
    assert float(params["params"]["alpha_raw"]) == -1.0
    expected = iqe(x, y, 8, "maxmean", jax.nn.sigmoid(-1.0))
    assert np.all(np.asarray(expected) > 0.1)
    np.testing.assert_allclose(jax.jit(head.apply)(params, x, y), expected, rtol=1e-6)  # same function, same order
    # The head's alpha is sigmoid(alpha_raw): a wrong alpha would give another mix of max and mean.
    assert not np.allclose(iqe(x, y, 8, "maxmean", 0.5), expected, rtol=1e-3)
    assert head.is_quasimetric and not head.is_symmetric
    l2 = qm.make_head("l2")
    assert l2.is_symmetric
    assert l2.init(jax.random.PRNGKey(0), x, y) == {}
    np.testing.assert_allclose(l2.apply({}, jnp.ones((5, 32)), jnp.zeros((5, 32))), np.sqrt(32.0), rtol=1e-6)
