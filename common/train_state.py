"""Parameters trained by one optimizer, as a pytree: the one way every agent applies its gradients.

    tx = optimizers(config)["critic"]                 # built by a functools.cache'd function (see below)
    state = TrainState.create(params, tx)
    state = state.apply_gradients(grads)              # tx.update, then optax.apply_updates
    target = polyak_update(target, state.params, tau)  # target networks

``tx`` is static (part of the tree structure, not a leaf), like the config of an agent. Optax
transformations compare by identity (NamedTuples of closures), so two ``optax.adam(1e-3)`` calls give
*unequal* structures: agents created twice from one config would then not fit one ``jax.lax.scan`` carry,
one jit cache entry or an orbax restore target. Build ``tx`` with a ``functools.cache``'d function of the
(frozen, hashable) config, so that equal configs give the very same ``tx`` object.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import optax


class TrainState(flax.struct.PyTreeNode):
    """``params`` and ``opt_state`` (leaves) and the optimizer ``tx`` that updates them (static)."""

    params: Any
    opt_state: Any
    tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)

    @classmethod
    def create(cls, params: Any, tx: optax.GradientTransformation) -> "TrainState":
        return cls(params=params, opt_state=tx.init(params), tx=tx)

    def apply_gradients(self, grads: Any) -> "TrainState":
        """One optimizer step: ``params + tx.update(grads, opt_state, params)``."""
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        return self.replace(params=optax.apply_updates(self.params, updates), opt_state=opt_state)


def polyak_update(target_params: Any, online_params: Any, tau: float) -> Any:
    """Polyak averaging of target networks: ``(1 - tau) * target + tau * online``, leaf by leaf (``tau = 0``
    keeps the target, ``tau = 1`` copies the online parameters)."""
    return jax.tree.map(lambda target, online: (1 - tau) * target + tau * online, target_params, online_params)
