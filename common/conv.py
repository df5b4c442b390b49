"""Strided convolutions as one matrix product each (im2col), for the CPU backend.

XLA:CPU computes strided and transposed convolutions, and above all their gradients, far below its matmul
rate: in the 64x64 world model (D.2.1's conv pair at width 16, 512 frames) the decoder's transposed convolutions
took three quarters of an update. Every convolution here with a kernel a multiple of its stride and ``VALID``
padding is the same sum as one matrix product after a rearrangement of the input:

- a convolution of kernel ``k`` and stride ``s`` is, after space-to-depth by ``s``, a stride-1 convolution of
  kernel ``k / s`` on ``s * s * C`` channels, gathered as ``(k / s)^2`` shifted views (im2col) and multiplied
  by the rearranged kernel;
- a transposed convolution of kernel ``k >= s`` and stride ``s`` splits its output into ``s * s`` phases (the
  output positions of each residue modulo ``s``); each phase is a stride-1 convolution of the input with every
  ``s``-th tap of the kernel, so all of them are one product of the input's ``ceil(k / s)^2`` shifted views with a
  ``[ceil(k / s)^2 C, s^2 O]`` matrix, and depth-to-space interleaves the phases.

The results equal ``lax.conv_general_dilated`` / ``lax.conv_transpose`` up to float32 summation order, and the
parameters are those of ``flax.linen.Conv`` / ``ConvTranspose`` (same names, shapes and initialisers), so a
module can switch between the two forms without touching its checkpoints. Anything else (padding, dilation,
groups, other layouts) falls back to XLA's convolution. No library offers this rewrite for XLA:CPU (jax-ml/jax#12868
is the upstream report), hence the code.
"""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

NHWC = ("NHWC", "HWIO", "NHWC")


def _valid(padding) -> bool:
    return padding == "VALID" or (not isinstance(padding, str) and all(tuple(p) == (0, 0) for p in padding))


def _nhwc(dimension_numbers) -> bool:
    if dimension_numbers is None:
        return False
    if isinstance(dimension_numbers, lax.ConvDimensionNumbers):
        return tuple(dimension_numbers) == tuple(lax.conv_dimension_numbers((1, 1, 1, 1), (1, 1, 1, 1), NHWC))
    return tuple(dimension_numbers) == NHWC


def im2col_conv_supported(kernel_shape, strides, padding, lhs_dilation=None, rhs_dilation=None,
                          dimension_numbers=NHWC, feature_group_count: int = 1) -> bool:
    """Whether :func:`im2col_conv` computes this convolution (2-D, NHWC/HWIO, VALID, no dilation or groups,
    each kernel side a multiple of its stride)."""
    return (len(kernel_shape) == 4 and _valid(padding) and _nhwc(dimension_numbers) and feature_group_count == 1
            and all(d == 1 for d in (lhs_dilation or (1, 1))) and all(d == 1 for d in (rhs_dilation or (1, 1)))
            and all(k % s == 0 for k, s in zip(kernel_shape[:2], strides)))


def im2col_conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int]) -> jax.Array:
    """``lax.conv_general_dilated(x, kernel, strides, "VALID")`` in NHWC/HWIO as one matrix product.

    ``x`` [N, H, W, C], ``kernel`` [kh, kw, C, O] with ``kh % sh == kw % sw == 0``. Returns [N, H', W', O] with
    ``H' = (H - kh) // sh + 1``."""
    (kh, kw, c, o), (sh, sw) = kernel.shape, strides
    n, h, w, _ = x.shape
    out_h, out_w = (h - kh) // sh + 1, (w - kw) // sw + 1
    ph, pw = kh // sh, kw // sw  # taps of the stride-1 convolution after space-to-depth
    rows, cols = (out_h + ph - 1) * sh, (out_w + pw - 1) * sw  # the input the convolution reads
    x = x[:, :rows, :cols].reshape(n, rows // sh, sh, cols // sw, sw, c)
    x = x.transpose(0, 1, 3, 2, 4, 5).reshape(n, rows // sh, cols // sw, sh * sw * c)  # channels (r, q, c)
    patches = jnp.concatenate([x[:, p:p + out_h, q:q + out_w] for p in range(ph) for q in range(pw)], -1)
    # kernel tap (s * p + r, s * q' + q) -> row (p, q', r, q, c), the order of the patches' channels
    matrix = kernel.reshape(ph, sh, pw, sw, c, o).transpose(0, 2, 1, 3, 4, 5).reshape(ph * pw * sh * sw * c, o)
    return patches @ matrix


def im2col_conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                                dimension_numbers=None, feature_group_count=1, precision=None, **kwargs):
    """A drop-in ``conv_general_dilated`` (``flax.linen.Conv(conv_general_dilated=...)``): :func:`im2col_conv`
    where supported, else ``lax.conv_general_dilated`` with the same arguments."""
    if not kwargs and im2col_conv_supported(rhs.shape, window_strides, padding, lhs_dilation, rhs_dilation,
                                            dimension_numbers, feature_group_count):
        return im2col_conv(lhs, rhs, tuple(window_strides))
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                    dimension_numbers, feature_group_count, precision=precision, **kwargs)


def im2col_conv_transpose(x: jax.Array, kernel: jax.Array, strides: tuple[int, int]) -> jax.Array:
    """``lax.conv_transpose(x, kernel, strides, "VALID")`` (NHWC/HWIO, ``transpose_kernel=False``, as
    ``flax.linen.ConvTranspose``) as one matrix product. Needs each kernel side >= its stride.

    That convolution adds ``x[i] @ kernel[k - 1 - a]`` to output ``s * i + a``; output ``s * u + r`` is therefore
    the sum over ``p`` of ``x[u - p] @ kernel[k - 1 - (s * p + r)]``: a stride-1 convolution per phase ``r``."""
    (kh, kw, c, o), (sh, sw) = kernel.shape, strides
    n, h, w, _ = x.shape
    ph, pw = math.ceil(kh / sh), math.ceil(kw / sw)
    flipped = jnp.pad(kernel[::-1, ::-1], ((0, ph * sh - kh), (0, pw * sw - kw), (0, 0), (0, 0)))
    # tap (s * p + r, s * q' + q) -> row (p, q', c), column (r, q, o)
    matrix = flipped.reshape(ph, sh, pw, sw, c, o).transpose(0, 2, 4, 1, 3, 5).reshape(ph * pw * c, sh * sw * o)
    padded = jnp.pad(x, ((0, 0), (ph - 1, ph - 1), (pw - 1, pw - 1), (0, 0)))
    u, v = h + ph - 1, w + pw - 1  # positions per phase
    patches = jnp.concatenate([padded[:, ph - 1 - p:ph - 1 - p + u, pw - 1 - q:pw - 1 - q + v]
                               for p in range(ph) for q in range(pw)], -1)
    y = (patches @ matrix).reshape(n, u, v, sh, sw, o).transpose(0, 1, 3, 2, 4, 5).reshape(n, u * sh, v * sw, o)
    return y[:, :(h - 1) * sh + kh, :(w - 1) * sw + kw]


class ConvTranspose(nn.ConvTranspose):
    """``flax.linen.ConvTranspose`` with ``im2col=True``: the same parameters, computed by
    :func:`im2col_conv_transpose` where that applies (2-D, VALID, no dilation, mask or kernel transpose, kernel
    >= stride), else by the parent."""

    im2col: bool = False

    @nn.compact
    def __call__(self, inputs):
        kernel_size = tuple(self.kernel_size) if not isinstance(self.kernel_size, int) else (self.kernel_size,) * 2
        strides = tuple(self.strides or (1,) * len(kernel_size))
        strides = strides * len(kernel_size) if len(strides) == 1 else strides
        if not (self.im2col and len(kernel_size) == 2 and _valid(self.padding) and self.mask is None
                and not self.transpose_kernel and self.kernel_dilation in (None, 1, (1, 1))
                and all(k >= s for k, s in zip(kernel_size, strides))):
            return super().__call__(inputs)
        batch = inputs.shape[:-3]
        inputs = inputs.reshape((-1, *inputs.shape[-3:]))
        kernel = self.param("kernel", self.kernel_init, kernel_size + (inputs.shape[-1], self.features),
                            self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype) if self.use_bias else None
        inputs, kernel, bias = self.promote_dtype(inputs, kernel, bias, dtype=self.dtype)
        y = im2col_conv_transpose(inputs, kernel, strides)
        if bias is not None:
            y = y + bias
        return y.reshape((*batch, *y.shape[1:]))
