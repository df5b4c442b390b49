"""The same code on many devices: a data-sharded QRL update on 8 (virtual CPU) devices equals the
single-device update (vmapping over seeds is tested in tests/test_qrl_agent.py). Runs in a subprocess
because the device count is fixed when JAX starts (XLA_FLAGS=--xla_force_host_platform_device_count=8)."""
import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from platonic_rl.agents.qrl import QRLAgent, QRLConfig
    from platonic_rl.qrl import quasimetrics as qm

    assert jax.device_count() == 8, jax.devices()
    config = QRLConfig(encoder_hidden=(32, 32), latent_dim=16, projector_hidden=(32,), iqe_components=4,
                       iqe_dim_per_component=8, dynamics_hidden=(32,), cosine_decay_steps=None)
    rng = np.random.default_rng(0)
    n = 64
    batch = dict(observations=rng.normal(size=(n, 3)).astype(np.float32),
                 actions=rng.integers(-1, 3, n).astype(np.int32),
                 next_observations=rng.normal(size=(n, 3)).astype(np.float32),
                 rewards=-np.ones(n, np.float32))
    agent = QRLAgent.create(config, 0)
    update = jax.jit(QRLAgent.update)
    single, single_metrics = update(agent, batch)

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharded_batch = jax.device_put(batch, NamedSharding(mesh, P("data")))
    replicated = jax.device_put(agent, NamedSharding(mesh, P()))
    multi, multi_metrics = update(replicated, sharded_batch)
    jax.block_until_ready(multi)
    assert len(sharded_batch["observations"].sharding.device_set) == 8
    for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(multi.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
    for key in single_metrics:
        np.testing.assert_allclose(single_metrics[key], multi_metrics[key], rtol=2e-5, atol=2e-6)

    # Heads on sharded pairs give the unsharded distances.
    head = qm.make_head("pqe-lh")
    x, y = jax.random.normal(jax.random.PRNGKey(1), (2, 64, 32))
    params = head.init(jax.random.PRNGKey(2), x, y)
    d = jax.jit(head.apply)(params, *jax.device_put((x, y), NamedSharding(mesh, P("data"))))
    np.testing.assert_allclose(d, head.apply(params, x, y), rtol=1e-5)

    print("OK")
""")


def test_sharded_update_equals_single_device():
    env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_create_accepts_python_and_numpy_integer_seeds_and_typed_keys():
    from platonic_rl.agents.qrl import QRLAgent, QRLConfig
    tiny = QRLConfig(encoder_hidden=(8,), latent_dim=8, projector_hidden=(8,), iqe_components=2,
                     iqe_dim_per_component=4, dynamics_hidden=(8,))
    a, b, c = QRLAgent.create(tiny, 3), QRLAgent.create(tiny, np.int64(3)), QRLAgent.create(tiny, jax.random.key(3))
    for x, y, z in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(c)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    for too_large in (2 ** 40 + 3, np.int64(2 ** 31)):  # its high bits would be dropped: seed 3's key, or -2**31's
        with pytest.raises(ValueError, match=r"seed must be an integer in \[-2\*\*31, 2\*\*31\)"):
            QRLAgent.create(tiny, too_large)
    with pytest.raises(TypeError, match=r"config fields \['encoder_hidden'\] must be hashable"):
        QRLAgent.create(dataclasses.replace(tiny, encoder_hidden=[8]), 0)
