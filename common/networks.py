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


# ------------------------------------------------------------------- strided convolutions as matmuls
# XLA's CPU backend runs the gradients of its own strided and transposed convolutions far below its matmul
# speed (the D.2.1 decoder at width 16 on 512 images: 2.1 s for its gradient against 0.8 s as written below).
# These compute the same numbers as patches and one matmul per layer, which differentiate into slices, pads
# and matmuls only. No library offers them for flax that we know of.


def conv_valid(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """``lax.conv_general_dilated(x, kernel, (stride, stride), "VALID")`` (NHWC x HWIO -> NHWC) for a square
    kernel whose size is a multiple of ``stride``: space-to-depth by ``stride``, then the (k / stride)^2
    shifted views of the result concatenated into patches and one matmul."""
    k, _, c, out = kernel.shape
    if k % stride:
        raise ValueError(f"conv_valid: kernel size {k} must be a multiple of the stride {stride}")
    n, h, w, _ = x.shape
    ho, wo, taps = (h - k) // stride + 1, (w - k) // stride + 1, k // stride
    # x[s i + r] with i = u + m (output row u, tap block m) and r < stride: blocks of `stride` rows and columns
    blocks = x[:, :stride * (ho + taps - 1), :stride * (wo + taps - 1)].reshape(
        n, ho + taps - 1, stride, wo + taps - 1, stride, c)
    patches = jnp.concatenate([blocks[:, m:m + ho, :, q:q + wo] for m in range(taps) for q in range(taps)], -1)
    # patches [n, ho, stride, wo, stride, taps^2 c] ordered (m, q, channel): move the in-block offsets last
    patches = patches.reshape(n, ho, stride, wo, stride, taps, taps, c).transpose(0, 1, 3, 5, 6, 2, 4, 7)
    weights = kernel.reshape(taps, stride, taps, stride, c, out).transpose(0, 2, 1, 3, 4, 5)
    return patches.reshape(n, ho, wo, -1) @ weights.reshape(-1, out)


def conv_transpose_valid(x: jax.Array, kernel: jax.Array, stride: int) -> jax.Array:
    """``flax.linen.ConvTranspose(..., strides=(stride, stride), padding="VALID")`` on ``kernel`` (HWIO, not
    transposed), output ``(h - 1) stride + k``: each of the stride^2 output phases is a stride-1 convolution of
    the input with the kernel taps of that phase, so all of them are one matmul on ceil(k / stride)^2 shifted
    views (sub-pixel convolution), interleaved after. A 1x1 input is a single matmul."""
    k, _, c, out = kernel.shape
    n, h, w, _ = x.shape
    kernel = kernel[::-1, ::-1]  # the transposed convolution places input pixel i's tap a at output s i + a
    if h == w == 1:
        return (x.reshape(n, c) @ kernel.transpose(2, 0, 1, 3).reshape(c, -1)).reshape(n, k, k, out)
    taps = -(-k // stride)
    kernel = jnp.pad(kernel, ((0, taps * stride - k), (0, taps * stride - k), (0, 0), (0, 0)))
    # output row s u + p = sum_m input row u - m times kernel tap p + s m; pad the input by taps - 1 in front
    rows, cols = h + taps - 1, w + taps - 1
    padded = jnp.pad(x, ((0, 0), (taps - 1, taps - 1), (taps - 1, taps - 1), (0, 0)))
    patches = jnp.concatenate([padded[:, r:r + rows, q:q + cols] for r in range(taps) for q in range(taps)], -1)
    # view (r, q) holds input row u - (taps - 1 - r): it meets tap block m = taps - 1 - r
    weights = kernel.reshape(taps, stride, taps, stride, c, out)[::-1, :, ::-1].transpose(0, 2, 4, 1, 3, 5)
    y = patches @ weights.reshape(taps * taps * c, stride * stride * out)
    y = y.reshape(n, rows, cols, stride, stride, out).transpose(0, 1, 3, 2, 4, 5)
    return y.reshape(n, rows * stride, cols * stride, out)[:, :(h - 1) * stride + k, :(w - 1) * stride + k]


class StridedConv(nn.Module):
    """``nn.Conv(features, (k, k), (stride, stride), padding="VALID")`` -- the same parameters ("kernel" HWIO,
    "bias"), initialisation and outputs -- computed by :func:`conv_valid`, or ``nn.ConvTranspose`` by
    :func:`conv_transpose_valid` when ``transpose``. Parameters stay float32; ``dtype`` is the computation's."""

    features: int
    kernel_size: int
    stride: int = 2
    transpose: bool = False
    dtype: Any = None

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (self.kernel_size, self.kernel_size, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        if self.dtype is not None:
            x, kernel, bias = (v.astype(self.dtype) for v in (x, kernel, bias))
        batch = x.shape[:-3]
        x = x.reshape((-1, *x.shape[-3:]))
        y = (conv_transpose_valid if self.transpose else conv_valid)(x, kernel, self.stride) + bias
        return y.reshape((*batch, *y.shape[1:]))
