"""Small helpers shared by the agents."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def as_key(seed: int | jax.Array) -> jax.Array:
    """A PRNG key from an integer seed (Python, NumPy or traced scalar, e.g. under vmap over seeds), or
    the key itself if one is given."""
    return jax.random.PRNGKey(seed) if jnp.ndim(seed) == 0 else seed
