"""QRL losses as small pure functions (dissertation eq. 4.12 and section 4.3.4).

The full objective jointly updates the quasimetric model theta and a Lagrange multiplier lambda >= 0:

    min_theta max_{lambda >= 0}  -E_{s, g}[phi(d(s, g))]
                                 + lambda * (E_{(s, a, s', r)}[relu(d(s, s') + r)^2] - eps^2)     (4.12)

plus, to turn V* into Q*, a latent transition model T trained with

    L_transition = 1/2 (d(T(z, a), z')^2 + d(z', T(z, a))^2),     Q(s, a; g) = d(T(f(s), a), f(g)) - r.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def softplus_phi(distance: jax.Array, offset: float = 500.0, beta: float = 0.01) -> jax.Array:
    """phi(x) = -softplus(offset - x, beta) = -(1/beta) log(1 + exp(beta (offset - x)))     (C.24)

    With the defaults phi(x) = -100 softplus(5 - x / 100). It is monotonically increasing with a
    decreasing slope phi'(x) = sigmoid(beta (offset - x)), so large distances get less weight. (The text
    calls phi convex; -softplus of an affine decreasing argument is in fact concave, and the decreasing
    slope is the stated purpose.)
    """
    return -jax.nn.softplus(beta * (offset - distance)) / beta


def push_loss(distance: jax.Array, phi: Callable[[jax.Array], jax.Array] = softplus_phi) -> jax.Array:
    """-E_{s ~ p_state, g ~ p_goal}[phi(d(s, g))]: spreads random state-goal pairs apart (eq. 4.12)."""
    return -jnp.mean(phi(distance))


def constraint_violation(transition_distance: jax.Array, rewards: jax.Array) -> jax.Array:
    """E_{(s, a, s', r)}[relu(d(s, s') + r)^2]: squared excess of d(s, s') over the cost -r (eq. 4.12)."""
    if transition_distance.shape != rewards.shape:
        raise ValueError(f"transition_distance and rewards must have the same shape, got "
                         f"{transition_distance.shape} and {rewards.shape}")
    return jnp.mean(jnp.square(jax.nn.relu(transition_distance + rewards)))


def lagrangian_terms(violation: jax.Array, lagrange_raw: jax.Array, epsilon: float
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The two sides of the min-max in eq. 4.12, with lambda = softplus(lagrange_raw).

    Returns ``(model_term, multiplier_loss, lambda)``:
      * ``model_term = stop_grad(lambda) * violation`` -- minimised by the model;
      * ``multiplier_loss = -lambda * (stop_grad(violation) - eps^2)`` -- minimising it is gradient
        *ascent* of the Lagrangian in lambda: lambda grows while the constraint is violated.
    Summing both and differentiating w.r.t. (model, lagrange_raw) updates each with its own term only.
    """
    lam = jax.nn.softplus(lagrange_raw)
    model_term = jax.lax.stop_gradient(lam) * violation
    multiplier_loss = -lam * (jax.lax.stop_gradient(violation) - epsilon ** 2)
    return model_term, multiplier_loss, lam


def transition_loss(distance_fn: Callable[[jax.Array, jax.Array], jax.Array], predicted_next: jax.Array,
                    next_latent: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """1/2 (d(z'_pred, z')^2 + d(z', z'_pred)^2), averaged over the rows where ``mask`` is true.

    ``z'_pred = T(f(s), a)`` and ``z' = f(s')``; gradients reach both d and T (section 4.3.4).
    """
    return transition_loss_of(distance_fn(predicted_next, next_latent), distance_fn(next_latent, predicted_next),
                              mask)


def transition_loss_of(forward: jax.Array, backward: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """:func:`transition_loss` from its two distances, ``forward`` = d(z'_pred, z') and ``backward`` = d(z', z'_pred)
    per row (for a caller that computes many distances in one call)."""
    per_row = 0.5 * (jnp.square(forward) + jnp.square(backward))
    if mask is None:
        return jnp.mean(per_row)
    mask = mask.astype(per_row.dtype)
    return jnp.sum(per_row * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def q_cost(distance_to_goal_after_action: jax.Array, rewards: jax.Array | float = 0.0) -> jax.Array:
    """-Q(s, a; g) = d(T(f(s), a), f(g)) - r   (eq. 4.14). With constant costs r is a shift."""
    return distance_to_goal_after_action - rewards


def actor_loss(distances: jax.Array, log_probs: jax.Array, entropy_weight: jax.Array) -> jax.Array:
    """E[max_i d_i(T_i(f_i(s), a), f_i(g)) + alpha log pi(a | s, g)],  a ~ pi(. | s, g)   (section 4.3.4).

    ``distances: [num_critics, B]``: each critic's predicted distance to the goal after taking the sampled
    action; the max over critics is a pessimistic estimate (like min over twin Q-values). ``alpha`` is
    the (stop-gradient) entropy weight.
    """
    return jnp.mean(jnp.max(distances, axis=0) + jax.lax.stop_gradient(entropy_weight) * log_probs)

