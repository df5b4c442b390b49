"""Network pieces shared by the agents, the world model and the benchmarks."""
from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class MLP(nn.Module):
    """Dense layers of widths ``hidden`` with ``activation`` between them, then a linear ``out_dim`` output.

    ``activation`` names a ``flax.linen`` function ("relu" for the RL agents, "elu" for the Dreamer-style world
    model); ``zero_init_last`` starts the output layer at zero (a residual branch that begins as the identity).
    ``dtype`` is the computation dtype (e.g. ``jnp.bfloat16`` on GPU/TPU; None: float32): parameters stay
    float32, inputs, matmuls and activations run in ``dtype``, and the output is returned as float32.
    """

    hidden: Sequence[int]
    out_dim: int
    activation: str = "relu"
    zero_init_last: bool = False
    dtype: Any = None

    @nn.compact
    def __call__(self, x):
        act = getattr(nn, self.activation)
        for width in self.hidden:
            x = act(nn.Dense(width, dtype=self.dtype)(x))
        init = nn.initializers.zeros if self.zero_init_last else nn.initializers.lecun_normal()
        out = nn.Dense(self.out_dim, kernel_init=init, bias_init=nn.initializers.zeros, dtype=self.dtype)(x)
        return out if self.dtype is None else out.astype(jnp.float32)


COMPUTE_DTYPES = {"float32": None, "bfloat16": jnp.bfloat16}
"""``compute_dtype`` names the configs accept -> the ``dtype`` of the network modules (None: float32)."""


def compute_dtype(config: Any) -> Any:
    """The module ``dtype`` of ``config.compute_dtype``; raises ``ValueError`` naming the config's field."""
    if config.compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"{type(config).__name__}.compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got "
                         f"{config.compute_dtype!r}")
    return COMPUTE_DTYPES[config.compute_dtype]


class AtariConvBackbone(nn.Module):
    """The Atari conv net (Mnih et al.) that C.3.3 uses for 64x64 Fetch images, as in Contrastive RL:
    conv 32 8x8/4 -> 64 4x4/2 -> 64 3x3/1 (VALID, ReLU), flattened: 64x64 -> 4x4x64 = 1024 features.

    Input ``[..., H, W, C]``, uint8 (scaled to [0, 1]) or float (used as is); output ``[..., features]``.
    Every module that reads images owns its own copy (C.3.3); a module with two images (observation and
    goal) runs the same copy on both.
    """

    dtype: Any = None  # computation dtype (see MLP); features are returned in it

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        if images.ndim < 3:
            raise ValueError(f"AtariConvBackbone expects images [..., H, W, C], got shape {images.shape}")
        x = images.astype(jnp.float32) / 255.0 if images.dtype == jnp.uint8 else images
        batch = x.shape[:-3]
        x = x.reshape((-1, *x.shape[-3:]))
        for features, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            x = nn.relu(nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID", dtype=self.dtype)(x))
        return x.reshape((*batch, -1))
