import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.qrl import losses


def test_softplus_phi_hand_values_and_shape():
    # phi(x) = -100 softplus(5 - x / 100)   (C.24)
    assert float(losses.softplus_phi(jnp.float32(500.0))) == pytest.approx(-100 * np.log(2), rel=1e-5)
    assert float(losses.softplus_phi(jnp.float32(0.0))) == pytest.approx(-100 * np.log1p(np.exp(5)), rel=1e-5)
    x = jnp.linspace(0, 1000, 101)
    y = np.asarray(losses.softplus_phi(x))
    assert np.all(np.diff(y) > 0)  # monotonically increasing
    assert np.all(np.diff(y, 2) < 0)  # concave: slope decreases, large distances weigh less
    # Gradient: sigmoid(5 - x/100): ~1 for small distances, 1/2 at 500.
    assert float(jax.grad(losses.softplus_phi)(500.0)) == pytest.approx(0.5)


def test_push_loss():
    d = jnp.array([0.0, 500.0])
    expected = 100 * (np.log1p(np.exp(5)) + np.log(2)) / 2
    assert float(losses.push_loss(d)) == pytest.approx(expected, rel=1e-5)
    assert float(losses.push_loss(d, phi=lambda x: x)) == pytest.approx(-250.0)


def test_constraint_violation_hand():
    d = jnp.array([0.5, 2.0, 1.0])
    r = -jnp.ones(3)
    # relu([-0.5, 1, 0])^2 = [0, 1, 0]
    assert float(losses.constraint_violation(d, r)) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="same shape"):
        losses.constraint_violation(d, r[:2])


def test_lagrangian_terms_gradients():
    raw = jnp.float32(0.3)
    lam = jax.nn.softplus(raw)
    eps = 0.25

    def total(violation, raw):
        model_term, multiplier_loss, _ = losses.lagrangian_terms(violation, raw, eps)
        return model_term + multiplier_loss

    g_violation, g_raw = jax.grad(total, argnums=(0, 1))(jnp.float32(0.5), raw)
    assert float(g_violation) == pytest.approx(float(lam))  # model sees lambda, not the ascent term
    # d/draw of -softplus(raw) (v - eps^2) = -sigmoid(raw) (v - eps^2): descent raises lambda when violated.
    assert float(g_raw) == pytest.approx(-float(jax.nn.sigmoid(raw)) * (0.5 - eps ** 2), rel=1e-5)
    _, g_raw_ok = jax.grad(total, argnums=(0, 1))(jnp.float32(0.0), raw)
    assert float(g_raw_ok) > 0  # constraint satisfied: lambda shrinks


def test_transition_loss_hand_and_mask():
    d = lambda a, b: jnp.sum(jax.nn.relu(b - a), -1)  # an asymmetric toy quasimetric
    pred = jnp.array([[0.0, 0.0], [0.0, 0.0]])
    nxt = jnp.array([[1.0, -2.0], [3.0, 0.0]])
    # row 0: d(p, n) = 1, d(n, p) = 2 -> 2.5;  row 1: d(p, n) = 3, d(n, p) = 0 -> 4.5
    assert float(losses.transition_loss(d, pred, nxt)) == pytest.approx(3.5)
    assert float(losses.transition_loss(d, pred, nxt, jnp.array([True, False]))) == pytest.approx(2.5)
    assert float(losses.transition_loss(d, pred, nxt, jnp.array([False, False]))) == 0.0


def test_q_cost():
    assert float(losses.q_cost(jnp.float32(3.0), -1.0)) == 4.0
