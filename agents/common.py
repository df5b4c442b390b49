"""Small helpers shared by the agents."""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp


def as_key(seed: int | jax.Array) -> jax.Array:
    """A raw ``uint32[2]`` PRNG key from an integer seed (Python, NumPy or traced scalar, e.g. under vmap over
    seeds), from a typed key (``jax.random.key``), or the raw key itself if one is given."""
    if jax.dtypes.issubdtype(jnp.result_type(seed), jax.dtypes.prng_key):
        return jax.random.key_data(seed)
    return jax.random.PRNGKey(seed) if jnp.ndim(seed) == 0 else seed


def compiled_create(create):
    """Decorator for an agent's ``create(cls, config, seed)``: build the agent in one compiled call.

    Initialising networks op by op compiles every primitive on its own (seconds on CPU, each time a new agent
    is made); traced once, the whole initial state (parameters, optimizer states, rng) is one executable,
    reused for every seed of the same config. ``config`` must be hashable (the agents' configs are frozen
    dataclasses); ``seed`` is an int, a traced scalar (vmap over seeds) or a PRNG key. Same values as eager.
    Apply below ``@classmethod``.
    """
    jitted = jax.jit(create, static_argnums=(0, 1))

    @functools.wraps(create)
    def wrapper(cls, config, seed: int | jax.Array = 0):
        try:
            hash(config)
        except TypeError as error:
            unhashable = [f.name for f in dataclasses.fields(config) if not _is_hashable(getattr(config, f.name))]
            raise TypeError(f"{cls.__name__}.create: config fields {unhashable} must be hashable "
                            "(tuples, not lists), since the config is static in every jitted call") from error
        return jitted(cls, config, seed)

    return wrapper


def _is_hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
