"""The strided convolutions written as matmuls against flax's own convolutions: same parameters, same numbers."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.common.networks import StridedConv, conv_valid

# (kernel, stride, in channels, out channels, input size): D.2.1 encoder / decoder layers (the first of each, and
# an odd input size that VALID crops), the Atari stem's 8x8/4, stride 1, and a kernel the stride does not divide
CONV = [(4, 2, 3, 4, 64), (4, 2, 4, 8, 31), (8, 4, 3, 5, 17), (3, 1, 5, 7, 9)]
TRANSPOSED = [(5, 2, 32, 16, 1), (6, 2, 4, 3, 13), (3, 1, 4, 5, 6), (5, 3, 4, 5, 4)]


@pytest.mark.parametrize("transpose,shape", [(False, s) for s in CONV] + [(True, s) for s in TRANSPOSED])
def test_strided_conv_equals_flax_conv(transpose, shape):
    k, stride, c_in, c_out, size = shape
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, size, size, c_in)), jnp.float32)
    ours = StridedConv(c_out, k, stride, transpose=transpose)
    flax_conv = (nn.ConvTranspose if transpose else nn.Conv)(c_out, (k, k), (stride, stride), padding="VALID")
    params = ours.init(jax.random.PRNGKey(3), x)
    # the same parameter tree and initial values, so checkpoints and seeds carry over
    jax.tree.map(np.testing.assert_array_equal, params, flax_conv.init(jax.random.PRNGKey(3), x))
    params = jax.tree.map(lambda p: p + 0.1, params)  # a non-zero bias too

    @jax.jit
    def outputs_and_grads(params, x):
        def loss(module, params, x):  # a weighted sum, so every output element's gradient differs
            out = module.apply(params, x)
            return jnp.sum(out * jnp.cos(jnp.arange(out.size, dtype=jnp.float32).reshape(out.shape)))
        return [(m.apply(params, x), jax.grad(loss, argnums=(1, 2))(m, params, x)) for m in (ours, flax_conv)]

    (out, got), (expected, want) = outputs_and_grads(params, x)
    np.testing.assert_allclose(out, expected, atol=2e-5 * np.sqrt(k * k * c_in), rtol=0)
    scale = expected.size / c_out  # a parameter's gradient sums over every output position
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=1e-5 * scale, rtol=1e-5), got, want)


def test_strided_conv_keeps_batch_dims_and_computes_in_dtype():
    x = jnp.ones((2, 3, 10, 10, 4))
    module = StridedConv(6, 4, 2, dtype=jnp.bfloat16)
    params = module.init(jax.random.PRNGKey(0), x)
    out = module.apply(params, x)
    assert out.shape == (2, 3, 4, 4, 6) and out.dtype == jnp.bfloat16
    assert jax.tree.leaves(params)[0].dtype == jnp.float32


def test_conv_valid_rejects_a_kernel_the_stride_does_not_divide():
    with pytest.raises(ValueError, match="kernel size 5 must be a multiple of the stride 2"):
        conv_valid(jnp.ones((1, 9, 9, 1)), jnp.ones((5, 5, 1, 1)), 2)
