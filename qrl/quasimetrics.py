"""Quasimetric heads: pure functions on latent pairs, plus thin Flax Linen modules.

A head maps two latents ``x, y`` of shape ``[..., dim]`` (any matching leading shape) to a distance
``d(x, y)`` of shape ``[...]``. Quasimetric heads satisfy d(x, x) = 0, d >= 0 and the triangle inequality
but need not be symmetric.

IQE (Interval Quasimetric Embedding, dissertation section 3.6). The latent is reshaped to
``[num_components, dim_per_component]``. For component ``i`` with entries ``x_ij`` and ``y_ij``:

    d_i(x, y) = Lebesgue measure of  U_j [x_ij, max(x_ij, y_ij)]

and the components are combined by ``sum`` (IQE-sum) or ``maxmean``:

    d(x, y) = alpha * max_i d_i + (1 - alpha) * mean_i d_i,   alpha = sigmoid(alpha_raw),

with ``alpha`` weighting the max and ``alpha_raw`` a learned scalar initialised to -1 (alpha ~ 0.27).

The union length is computed without sorting, as  sum(right boundaries) - sum(left boundaries)  of the
union's disjoint segments. A start s_k is a left boundary iff its interval is non-empty and no other
non-empty interval covers it from the left (s_j < s_k <= e_j, or an equal start with a lower index);
an end e_k is a right boundary iff no other non-empty interval covers it from the right
(s_j <= e_k < e_j, or an equal end with a lower index). The boundary indicators are O(l^2) comparisons
and piecewise constant, so the gradient is +1 on right and -1 on left boundaries. On CPU this is 10-20x
faster (forward + backward) than the sort-and-count formulation, whose sort and max reductions have slow
backward passes in XLA; the two agree to float precision (see tests).
"""
from __future__ import annotations

from typing import Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

Reduction = Literal["sum", "maxmean"]


def _check_pair(x: jax.Array, y: jax.Array) -> None:
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x and y must have the same last dimension, got shapes {x.shape} and {y.shape}")


def iqe_components(x: jax.Array, y: jax.Array, dim_per_component: int) -> jax.Array:
    """Per-component IQE distances ``[..., num_components]`` (union-of-intervals lengths)."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_pair(x, y)
    dim = x.shape[-1]
    if dim_per_component < 1 or dim % dim_per_component:
        raise ValueError(f"latent dimension {dim} must be a positive multiple of dim_per_component="
                         f"{dim_per_component}")
    x, y = jnp.broadcast_arrays(x, y)
    shape = x.shape[:-1] + (dim // dim_per_component, dim_per_component)
    starts = x.reshape(shape)
    ends = jnp.maximum(starts, y.reshape(shape))
    s, e = jax.lax.stop_gradient(starts), jax.lax.stop_gradient(ends)
    nonempty = e > s
    index = jnp.arange(dim_per_component)
    lower_index = index[None, :] < index[:, None]  # [k, j]: j comes before k
    s_k, s_j = s[..., :, None], s[..., None, :]
    e_k, e_j = e[..., :, None], e[..., None, :]
    other = nonempty[..., None, :]
    start_covered = other & (((s_j < s_k) & (s_k <= e_j)) | ((s_j == s_k) & lower_index))
    end_covered = other & (((s_j <= e_k) & (e_k < e_j)) | ((e_j == e_k) & lower_index))
    left = nonempty & ~jnp.any(start_covered, axis=-1)
    right = nonempty & ~jnp.any(end_covered, axis=-1)
    return jnp.sum(jnp.where(right, ends, 0.0) - jnp.where(left, starts, 0.0), axis=-1)


def reduce_components(components: jax.Array, reduction: Reduction, alpha: jax.Array | None = None
                      ) -> jax.Array:
    """Combine per-component distances: ``sum``, or ``alpha * max + (1 - alpha) * mean``."""
    if reduction == "sum":
        return components.sum(-1)
    if reduction == "maxmean":
        if alpha is None:
            raise ValueError("reduction='maxmean' needs alpha (the weight of the max), got None")
        return alpha * components.max(-1) + (1 - alpha) * components.mean(-1)
    raise ValueError(f"reduction must be 'sum' or 'maxmean', got {reduction!r}")


def iqe(x: jax.Array, y: jax.Array, dim_per_component: int, reduction: Reduction = "maxmean",
        alpha: jax.Array | float | None = None) -> jax.Array:
    """IQE distance ``d(x, y)`` of shape ``[...]``; see the module docstring."""
    return reduce_components(iqe_components(x, y, dim_per_component), reduction, alpha)


def euclidean(x: jax.Array, y: jax.Array) -> jax.Array:
    """Symmetric l2 metric ``||x - y||_2`` with a finite (zero) gradient at x = y."""
    x, y = jnp.asarray(x), jnp.asarray(y)
    _check_pair(x, y)
    sq = jnp.sum(jnp.square(x - y), axis=-1)
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


class IQE(nn.Module):
    """IQE head. Input latents must have a dimension divisible by ``dim_per_component``."""

    dim_per_component: int = 32
    reduction: Reduction = "maxmean"
    alpha_raw_init: float = -1.0

    is_quasimetric = True
    is_symmetric = False

    @nn.compact
    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        alpha = None
        if self.reduction == "maxmean":
            alpha = nn.sigmoid(self.param("alpha_raw", nn.initializers.constant(self.alpha_raw_init), ()))
        return iqe(x, y, self.dim_per_component, self.reduction, alpha)


class Euclidean(nn.Module):
    """Symmetric l2 metric head (the 'QRL objective with symmetric l2 distance' ablation)."""

    is_quasimetric = True
    is_symmetric = True

    @nn.compact
    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        return euclidean(x, y)


HEADS: dict[str, type[nn.Module]] = {"iqe": IQE, "l2": Euclidean}


def make_head(name: str, **kwargs) -> nn.Module:
    """Build a head from the registry by name (``'iqe'`` takes ``dim_per_component``, ``reduction``)."""
    if name not in HEADS:
        raise ValueError(f"unknown quasimetric head {name!r}; expected one of {sorted(HEADS)}")
    return HEADS[name](**kwargs)
