"""The one compiled "K updates on sampled batches" function every training loop uses.

    agent, metrics, finite = update_steps(agent, sampler, keys)     # len(keys) updates in one call
    check_finite(finite, first_step=step)                            # raises NonFiniteError, naming both

``sampler`` is a pytree with ``sample(key) -> batch`` (:mod:`platonic_rl.envs.replay`: a dataset, an
episode buffer with goal relabelling, a sequence buffer); each update is ``agent.update(sampler.sample(k))``.
Several updates are one ``lax.scan``; a single update is compiled without a loop (XLA:CPU runs convolutions
inside a loop body several times slower than outside, jax-ml/jax#12868, so conv agents on CPU run one update
per call). The metrics are averaged over the call's updates. ``finite`` holds, per update, whether every
metric and every floating-point leaf of the agent's state is finite: checked inside the compiled call,
reported by the loop between calls, which then stops before saving the damaged state.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


class NonFiniteError(FloatingPointError):
    """A NaN or an infinity in a loss, a gradient norm or the agent's parameters."""


def _all_finite(tree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


@jax.jit
def update_steps(agent, sampler, keys: jax.Array):
    """``len(keys)`` updates, one per key, in one compiled call. Returns ``(agent, mean metrics, finite)``
    with ``finite`` a dict of bool ``[len(keys)]``: one entry per metric, plus ``agent_state``."""

    def step(agent, key):
        agent, metrics = agent.update(sampler.sample(key))
        finite = {name: jnp.all(jnp.isfinite(value)) for name, value in metrics.items()}
        finite["agent_state"] = _all_finite(agent)
        return agent, (metrics, finite)

    if keys.shape[0] == 1:  # no loop at all: even a one-trip scan stays a while loop in XLA
        agent, (metrics, finite) = step(agent, keys[0])
        return agent, metrics, jax.tree_util.tree_map(lambda x: x[None], finite)
    agent, (metrics, finite) = jax.lax.scan(step, agent, keys)
    return agent, jax.tree_util.tree_map(jnp.mean, metrics), finite


def updates_per_call(per_call: int | None, total: int, convolutions: bool) -> int:
    """How many of ``total`` updates go in one compiled call: ``per_call`` if given (it must divide ``total``), else
    all of them, except for an update with XLA convolutions (``convolutions``) on the CPU backend: one per call
    (jax-ml/jax#12868, above)."""
    if per_call is None:
        return 1 if convolutions and jax.default_backend() == "cpu" else total
    if per_call < 1 or total % per_call:
        raise ValueError(f"updates_per_call must be a positive divisor of the {total} updates (or None), got {per_call}")
    return per_call


def update_in_calls(agent, sampler, keys: jax.Array, per_call: int, first_step: int = 1):
    """``len(keys)`` updates as calls of :func:`update_steps` of ``per_call`` updates each: the same updates and
    batches however they are split. Raises NonFiniteError naming the first bad update (counted from
    ``first_step``); returns ``(agent, metrics averaged over all updates)``."""
    metrics = []
    for i, chunk in enumerate(jnp.split(keys, keys.shape[0] // per_call)):
        agent, chunk_metrics, finite = update_steps(agent, sampler, chunk)
        check_finite(finite, first_step=first_step + i * per_call)
        metrics.append(chunk_metrics)
    return agent, jax.tree.map(lambda *m: jnp.mean(jnp.stack(m)), *metrics)


@functools.partial(jax.jit, static_argnums=1)
def chain_keys(key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """``n`` keys drawn one after the other, ``key, k_i = split(key)``: ``(last key, keys [n, 2])``."""
    def draw(key, _):
        key, sub = jax.random.split(key)
        return key, sub

    return jax.lax.scan(draw, key, None, length=n)


def check_finite(finite: dict, first_step: int, unit: str = "update") -> None:
    """Raise :class:`NonFiniteError` at the first update of a call where anything was not finite, naming the
    update's step (``first_step`` is the step of the call's first update) and the quantities. ``unit``: what one
    entry of the flags is (``"iteration"`` for the device loop, whose flags are per iteration)."""
    finite = {name: np.asarray(value) for name, value in finite.items()}
    ok = np.logical_and.reduce(list(finite.values()))
    if ok.all():
        return
    index = int(np.argmin(ok))
    bad = sorted(name for name, value in finite.items() if not value[index])
    what = ", ".join(bad)
    raise NonFiniteError(f"non-finite values at {unit} {first_step + index}: {what} "
                         "(NaN or inf; the run stopped before saving this state, so its last checkpoint is the last "
                         "good one). A NaN in the data, a too large learning rate or a diverging loss are the usual causes.")
