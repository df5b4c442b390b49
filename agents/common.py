"""Small helpers shared by the agents."""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np


def as_key(seed: int | jax.Array) -> jax.Array:
    """A raw ``uint32[2]`` PRNG key from an integer seed (Python, NumPy or traced scalar, e.g. under vmap over
    seeds), from a typed key (``jax.random.key``), or the raw key itself if one is given. An integer seed outside
    int32's range is refused: without 64-bit mode its high bits would be dropped, giving another seed's key."""
    if jax.dtypes.issubdtype(jnp.result_type(seed), jax.dtypes.prng_key):
        return jax.random.key_data(seed)
    if isinstance(seed, (numbers.Integral, np.integer)) and not -2 ** 31 <= int(seed) < 2 ** 31:
        raise ValueError(f"seed must be an integer in [-2**31, 2**31) or a PRNG key, got {seed}")
    return jax.random.PRNGKey(seed) if jnp.ndim(seed) == 0 else seed


def compiled_create(create):
    """Decorator for an agent's ``create(cls, config, seed)``: build the agent in one compiled call.

    Initialising networks op by op compiles every primitive on its own (seconds on CPU, each time a new agent
    is made); traced once, the whole initial state (parameters, optimizer states, rng) is one executable,
    reused for every seed of the same config. ``config`` must be hashable (the agents' configs are frozen
    dataclasses); ``seed`` is an int, a traced scalar (vmap over seeds) or a PRNG key, made a raw key before the
    call, so that every kind of seed (Python or NumPy integer, raw or typed key) shares the one executable. Same
    values as eager. Apply below ``@classmethod``.
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
        return jitted(cls, config, as_key(seed))

    return wrapper


def _is_hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def check_config(config, at_least_one: tuple[str, ...] = (), open_unit: tuple[str, ...] = ()) -> None:
    """Checks every agent config shares, for its ``__post_init__``: each hidden-width tuple (a field named
    ``hidden`` or ``*_hidden``) holds integers >= 1 (an empty tuple, no hidden layer, is fine), and each
    ``*learning_rate*`` field is a finite number > 0 (``None``, where a field allows it, is skipped); the fields
    named in ``at_least_one`` (sizes, counts) are >= 1 and those in ``open_unit`` (discounts, expectiles) in (0, 1).
    Raises ``ValueError`` naming ``ConfigClass.field``."""
    owner = type(config).__name__
    for field in dataclasses.fields(config):
        name, value = field.name, getattr(config, field.name)
        if (name == "hidden" or name.endswith("_hidden")) and isinstance(value, (tuple, list)):
            if any(isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1 for w in value):
                raise ValueError(f"{owner}.{name} must hold layer widths >= 1, got {tuple(value)}")
        if "learning_rate" in name and value is not None:
            if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
                    or value <= 0):
                raise ValueError(f"{owner}.{name} must be a finite number > 0, got {value!r}")
    for name in at_least_one:
        if getattr(config, name) < 1:
            raise ValueError(f"{owner}.{name} must be >= 1, got {getattr(config, name)}")
    for name in open_unit:
        if not 0.0 < getattr(config, name) < 1.0:
            raise ValueError(f"{owner}.{name} must be in (0, 1), got {getattr(config, name)}")


def as_batch(batch, keys) -> dict:
    """``batch`` with the entries named in ``keys`` (those present) as jax arrays, so that lists and NumPy
    arrays work like arrays (a no-op for arrays and tracers: the same values under jit); other entries are
    kept as they are. Raises ``TypeError`` if ``batch`` is not a mapping or an entry cannot be converted."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict of arrays, got {type(batch).__name__}")
    out = dict(batch)
    for key in keys:
        if key in out:
            try:
                out[key] = jnp.asarray(out[key])
            except (TypeError, ValueError) as error:
                raise TypeError(f"batch[{key!r}] must be an array (or a rectangular nested list of numbers): "
                                f"{error}") from error
    return out



class StatelessPolicy:
    """The contract's acting methods for agents whose actions depend only on (observations, goals): their
    policy state is ``None`` and ``step`` is ``act`` (mix in before ``flax.struct.PyTreeNode``)."""

    def initial_policy_state(self, batch_size: int) -> None:
        return None

    def step(self, policy_state, observations, goals, prev_actions=None, rng=None):
        """``(act(observations, goals, rng), policy_state)``; ``prev_actions`` is not needed."""
        return self.act(observations, goals, rng), policy_state
