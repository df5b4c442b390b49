"""Representation-learning objectives as plain JAX functions (jit/vmap/grad-able, batched).

Alignment and uniformity (Wang & Isola 2020; dissertation chapter 2), for features ``[..., n, d]``
(typically L2-normalised onto the hypersphere):

    L_align(f; alpha)  = E_{(x, y) positive} ||f(x) - f(y)||_2^alpha
    L_uniform(f; t)    = log E_{x != y} exp(-t ||f(x) - f(y)||_2^2)

Contrastive objectives take a critic matrix ``logits[..., i, j]`` with positives on the diagonal (build one
from two embedding sets with :func:`pairwise_logits` and an energy: dot, cosine or negative l2).

The QRL objective terms (eq. 4.12 and the transition loss) live in :mod:`platonic_rl.qrl.losses`.
"""
from __future__ import annotations

from typing import Literal

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


def uniform_loss_two_view(x: jax.Array, y: jax.Array, t: float = 2.0) -> jax.Array:
    """The two-view form (L_uniform(x; t) + L_uniform(y; t)) / 2 used with two augmentations."""
    return (uniform_loss(x, t) + uniform_loss(y, t)) / 2


# ------------------------------------------------------------------------------ contrastive objectives

Energy = Literal["dot", "cosine", "neg_l2"]


def pairwise_logits(x: jax.Array, y: jax.Array, energy: Energy = "dot", temperature: float = 1.0
                    ) -> jax.Array:
    """Critic matrix ``logits[..., i, j] = energy(x_i, y_j) / temperature`` for ``x, y: [..., n, d]``.

    ``dot``: <x, y>; ``cosine``: <x/||x||, y/||y||>; ``neg_l2``: -||x - y||_2 (safe at x = y).
    """
    x, y = _check_features("x", x), _check_features("y", y)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must have the same feature dimension, got {x.shape} and {y.shape}")
    if isinstance(temperature, (int, float)) and temperature <= 0:  # may also be a traced array
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if energy == "dot":
        logits = x @ jnp.swapaxes(y, -1, -2)
    elif energy == "cosine":
        xn = x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
        yn = y / jnp.maximum(jnp.linalg.norm(y, axis=-1, keepdims=True), 1e-12)
        logits = xn @ jnp.swapaxes(yn, -1, -2)
    elif energy == "neg_l2":
        sq = jnp.sum(jnp.square(x[..., :, None, :] - y[..., None, :, :]), axis=-1)
        positive = sq > 0
        logits = -jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)
    else:
        raise ValueError(f"energy must be 'dot', 'cosine' or 'neg_l2', got {energy!r}")
    return logits / temperature


def _check_square(logits: jax.Array) -> jax.Array:
    logits = jnp.asarray(logits)
    if logits.ndim < 2 or logits.shape[-1] != logits.shape[-2]:
        raise ValueError(f"logits must be a square [..., n, n] matrix with positives on the diagonal, "
                         f"got shape {logits.shape}")
    return logits


def info_nce(logits: jax.Array, direction: Literal["forward", "backward", "symmetric"] = "symmetric"
             ) -> jax.Array:
    """InfoNCE (van den Oord et al. 2018) on a critic matrix with positives on the diagonal:

        forward  = -mean_i log softmax_j(logits[i, :])[i]   (each x_i picks its y_i among all y)
        backward = -mean_j log softmax_i(logits[:, j])[j]   (each y_j picks its x_j among all x)
        symmetric = (forward + backward) / 2.
    """
    logits = _check_square(logits)
    diagonal = jnp.diagonal(logits, axis1=-2, axis2=-1)
    forward = jnp.mean(jax.nn.logsumexp(logits, axis=-1) - diagonal, axis=-1)
    backward = jnp.mean(jax.nn.logsumexp(logits, axis=-2) - diagonal, axis=-1)
    if direction == "forward":
        return forward
    if direction == "backward":
        return backward
    if direction == "symmetric":
        return (forward + backward) / 2
    raise ValueError(f"direction must be 'forward', 'backward' or 'symmetric', got {direction!r}")


def binary_nce(logits: jax.Array) -> jax.Array:
    """Binary NCE (as in Contrastive RL, Eysenbach et al. 2022): sigmoid cross-entropy of the critic
    matrix against the identity, averaged over all n^2 entries:

        -mean_{i,j} [ 1[i = j] log sigmoid(l_ij) + 1[i != j] log(1 - sigmoid(l_ij)) ].
    """
    logits = _check_square(logits)
    labels = jnp.eye(logits.shape[-1], dtype=logits.dtype)
    # -log sigmoid(l) = softplus(-l); -log(1 - sigmoid(l)) = softplus(l)
    per_entry = labels * jax.nn.softplus(-logits) + (1 - labels) * jax.nn.softplus(logits)
    return jnp.mean(per_entry, axis=(-2, -1))
