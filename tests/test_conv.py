"""The im2col convolutions against XLA's: values, gradients, parameters, and where they fall back."""
import dataclasses
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from platonic_rl.common.conv import (ConvTranspose, im2col_conv, im2col_conv_general_dilated,
                                     im2col_conv_supported, im2col_conv_transpose)
from platonic_rl.denoised.model import FactoredRSSM, WorldModelConfig, init_params

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from arbitrary import arbitrary_like  # noqa: E402

NHWC = ("NHWC", "HWIO", "NHWC")


def _arrays(x_shape, k_shape, seed=0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(size=x_shape), jnp.float32), jnp.asarray(rng.normal(size=k_shape), jnp.float32))


# (input H, W, kernel, stride): square and oblong inputs, inputs the stride does not divide, stride 1 and 4
CONV_CASES = [((64, 64), (4, 4), (2, 2)), ((9, 11), (4, 4), (2, 2)), ((7, 6), (3, 3), (1, 1)),
              ((20, 17), (8, 8), (4, 4)), ((6, 10), (2, 4), (2, 2))]


@pytest.mark.parametrize("hw, kernel, stride", CONV_CASES)
def test_im2col_conv_equals_xla(hw, kernel, stride):
    x, k = _arrays((2, *hw, 3), (*kernel, 3, 5))
    expected = lax.conv_general_dilated(x, k, stride, "VALID", dimension_numbers=NHWC)
    got = im2col_conv(x, k, stride)
    assert got.shape == expected.shape
    # sums of at most 8*8*3 products of unit normals: float32 error well under 1e-4
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


# (input H, W, kernel, stride): the decoder's four layers (1x1 -> 5, 5 -> 13, 13 -> 30, 30 -> 64), odd and even
# kernels, a kernel equal to its stride, stride 1, an oblong input
TRANSPOSE_CASES = [((1, 1), (5, 5), (2, 2)), ((5, 5), (5, 5), (2, 2)), ((4, 3), (6, 6), (2, 2)),
                   ((3, 3), (2, 2), (2, 2)), ((4, 5), (3, 3), (1, 1)), ((3, 4), (7, 4), (3, 2))]


@pytest.mark.parametrize("hw, kernel, stride", TRANSPOSE_CASES)
def test_im2col_conv_transpose_equals_xla(hw, kernel, stride):
    x, k = _arrays((2, *hw, 4), (*kernel, 4, 3))
    expected = lax.conv_transpose(x, k, stride, "VALID", dimension_numbers=NHWC)
    got = im2col_conv_transpose(x, k, stride)
    assert got.shape == expected.shape == (2, (hw[0] - 1) * stride[0] + kernel[0],
                                           (hw[1] - 1) * stride[1] + kernel[1], 3)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=0)


def test_gradients_equal_xla():
    x, k = _arrays((2, 13, 13, 4), (6, 6, 4, 3))
    w = jnp.asarray(np.random.default_rng(1).normal(size=(2, 30, 30, 3)), jnp.float32)  # a non-uniform cotangent

    def loss(fn):  # compiled once: op by op, each primitive of the gradient was compiled on its own
        return jax.jit(jax.grad(lambda x, k: jnp.sum(w * fn(x, k)), argnums=(0, 1)))(x, k)

    for got, expected in zip(loss(lambda x, k: im2col_conv_transpose(x, k, (2, 2))),
                             loss(lambda x, k: lax.conv_transpose(x, k, (2, 2), "VALID", dimension_numbers=NHWC))):
        np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-5)
    x, k = _arrays((2, 14, 14, 4), (4, 4, 4, 3))
    w = w[:, :6, :6]
    for got, expected in zip(loss(lambda x, k: im2col_conv(x, k, (2, 2))),
                             loss(lambda x, k: lax.conv_general_dilated(x, k, (2, 2), "VALID", dimension_numbers=NHWC))):
        np.testing.assert_allclose(got, expected, atol=1e-3, rtol=1e-5)


def test_supported_cases_and_fallback():
    assert im2col_conv_supported((4, 4, 3, 8), (2, 2), "VALID")
    assert im2col_conv_supported((4, 4, 3, 8), (2, 2), ((0, 0), (0, 0)))
    assert not im2col_conv_supported((3, 3, 3, 8), (2, 2), "VALID")     # kernel not a multiple of the stride
    assert not im2col_conv_supported((4, 4, 3, 8), (2, 2), "SAME")
    assert not im2col_conv_supported((4, 4, 3, 8), (2, 2), "VALID", rhs_dilation=(2, 2))
    assert not im2col_conv_supported((4, 4, 3, 8), (2, 2), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
    x, k = _arrays((1, 9, 9, 3), (3, 3, 3, 2))  # stride 2, kernel 3, SAME: XLA's convolution, same arguments
    np.testing.assert_array_equal(
        im2col_conv_general_dilated(x, k, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NHWC),
        lax.conv_general_dilated(x, k, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NHWC))


@pytest.mark.parametrize("padding, kernel", [("VALID", (6, 6)), ("SAME", (6, 6)), ("VALID", (1, 1))])
def test_flax_modules_keep_parameters_and_outputs(padding, kernel):
    x = _arrays((2, 5, 5, 4), (1,))[0]
    ours, theirs = ConvTranspose(3, kernel, (2, 2), padding=padding, im2col=True), nn.ConvTranspose(3, kernel, (2, 2),
                                                                                                 padding=padding)
    params, reference = ours.init(jax.random.PRNGKey(0), x), theirs.init(jax.random.PRNGKey(0), x)
    assert jax.tree.structure(params) == jax.tree.structure(reference)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(reference)):  # same initialisers, same draws
        np.testing.assert_array_equal(a, b)
    params = jax.tree.map(lambda p: p + 0.1, params)  # a non-zero bias
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), atol=1e-4, rtol=0)
    conv = nn.Conv(3, (4, 4), (2, 2), padding="VALID", conv_general_dilated=im2col_conv_general_dilated)
    conv_params = conv.init(jax.random.PRNGKey(1), x)
    np.testing.assert_allclose(conv.apply(conv_params, x),
                               nn.Conv(3, (4, 4), (2, 2), padding="VALID").apply(conv_params, x), atol=1e-4, rtol=0)


def test_world_model_conv_impls_agree():
    model = WorldModelConfig(obs_shape=(64, 64, 3), conv_width=4, embed_dim=32, x_belief=8, x_state=4, y_belief=8,
                             y_state=4, hidden=16)
    xla, ours = (dataclasses.replace(model, conv_impl=impl) for impl in ("xla", "im2col"))
    assert ours.im2col and not xla.im2col
    # Both implementations read the same parameters, and any values do (tests/fixtures/arbitrary.py).
    params = arbitrary_like(jax.eval_shape(lambda key: init_params(xla, key), jax.random.PRNGKey(0)))
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8))
    features = jnp.asarray(rng.normal(size=(2, 24)), jnp.float32)
    for method, arg in ((FactoredRSSM.encode, images), (FactoredRSSM.decode, features)):
        ours_out, xla_out = (jax.jit(lambda p, a, c=c: FactoredRSSM(c).apply(p, a, method=method))(params, arg)
                             for c in (ours, xla))
        np.testing.assert_allclose(ours_out, xla_out, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="conv_impl"):
        WorldModelConfig(conv_impl="cudnn")
