"""Representation-learning objectives as plain JAX functions (jit/vmap/grad-able, batched).

Alignment and uniformity (Wang & Isola 2020; dissertation chapter 2), for features ``[..., n, d]``
(typically L2-normalised onto the hypersphere):

    L_align(f; alpha)  = E_{(x, y) positive} ||f(x) - f(y)||_2^alpha
    L_uniform(f; t)    = log E_{x != y} exp(-t ||f(x) - f(y)||_2^2)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def _check_features(name: str, x: jax.Array) -> jax.Array:
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"{name} must have shape [..., n, d], got {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must be a floating-point array, got dtype {x.dtype}")
    return x


def align_loss(x: jax.Array, y: jax.Array, alpha: float = 2.0) -> jax.Array:
    """L_align(alpha) = mean_i ||x_i - y_i||^alpha over positive pairs (x_i, y_i), ``x, y: [..., n, d]``.

    Computed as (||.||^2)^(alpha / 2) with a safe power, so the gradient at x_i = y_i is finite (zero)
    for every alpha > 0.
    """
    x, y = _check_features("x", x), _check_features("y", y)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {x.shape} and {y.shape}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    sq = jnp.sum(jnp.square(x - y), axis=-1)
    if alpha == 2:
        return sq.mean(-1)
    positive = sq > 0
    return jnp.where(positive, jnp.where(positive, sq, 1.0) ** (alpha / 2), 0.0).mean(-1)


def uniform_loss(x: jax.Array, t: float = 2.0) -> jax.Array:
    """L_uniform(t) = log mean_{i != j} exp(-t ||x_i - x_j||^2), ``x: [..., n, d]`` (diagonal excluded).

    In logsumexp form; squared distances from the Gram matrix, clipped at 0 against round-off.
    """
    x = _check_features("x", x)
    n = x.shape[-2]
    if n < 2:
        raise ValueError(f"uniform_loss needs at least 2 points, got n={n}")
    sq_norm = jnp.sum(jnp.square(x), axis=-1)
    gram = x @ jnp.swapaxes(x, -1, -2)
    sq_dist = jnp.maximum(sq_norm[..., :, None] + sq_norm[..., None, :] - 2 * gram, 0.0)
    off_diagonal = ~jnp.eye(n, dtype=bool)
    logits = jnp.where(off_diagonal, -t * sq_dist, -jnp.inf)
    return jax.nn.logsumexp(logits, axis=(-2, -1)) - jnp.log(n * (n - 1.0))
