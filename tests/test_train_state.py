"""The train state every agent updates its parameters with: one optax step, Polyak averaging, and agents from
equal configs having equal tree structures (the optimizers are static: one scan carry, one jit cache entry,
one orbax restore target for all of them)."""
import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from platonic_rl.agents import (CRLAgent, CRLConfig, DDPGHERAgent, DDPGHERConfig, DenoisedMDPAgent, GCBCAgent,
                                GCBCConfig, QRLAgent, QRLConfig, QRLContinuousAgent, QRLContinuousConfig)
from platonic_rl.common.train_state import TrainState, polyak_update

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402

PARAMS = {"w": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "b": jnp.array([0.25, -0.75])}
GRADS = {"w": jnp.array([[0.1, 0.2], [-0.3, 0.4]]), "b": jnp.array([-1.0, 2.0])}


@pytest.mark.parametrize("tx", [
    optax.adam(1e-2),
    optax.adamw(optax.cosine_decay_schedule(1e-2, 10), weight_decay=0.1),  # reads the params (weight decay)
    optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(0.1, momentum=0.9)),
], ids=["adam", "adamw_schedule", "clip_sgd"])
def test_apply_gradients_is_one_optax_step(tx):
    state = TrainState.create(PARAMS, tx)
    params, opt_state = PARAMS, tx.init(PARAMS)
    for _ in range(3):
        updates, opt_state = tx.update(GRADS, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = state.apply_gradients(GRADS)
    for got, want in zip(jax.tree.leaves((state.params, state.opt_state)), jax.tree.leaves((params, opt_state))):
        np.testing.assert_array_equal(got, want)
    assert state.tx is tx and len(jax.tree.leaves(state)) == len(jax.tree.leaves((params, opt_state)))  # static tx


def test_apply_gradients_jits_and_scans():
    state = TrainState.create(PARAMS, optax.adam(1e-2))
    scanned, _ = jax.lax.scan(lambda s, _: (s.apply_gradients(GRADS), None), state, length=3)
    stepped = state
    for _ in range(3):
        stepped = jax.jit(TrainState.apply_gradients)(stepped, GRADS)
    for a, b in zip(jax.tree.leaves(scanned), jax.tree.leaves(stepped)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_polyak_update():
    target, online = {"a": jnp.array([4.0, -2.0])}, {"a": jnp.array([8.0, 6.0])}
    np.testing.assert_array_equal(polyak_update(target, online, 0.0)["a"], target["a"])
    np.testing.assert_array_equal(polyak_update(target, online, 1.0)["a"], online["a"])
    np.testing.assert_array_equal(polyak_update(target, online, 0.25)["a"], [5.0, 0.0])  # 0.75 t + 0.25 o


def test_optimizers_compare_by_identity():
    """Why the agents build their optimizers with a cached function: two ``optax.adam`` are unequal."""
    one, two = (TrainState.create(PARAMS, optax.adam(1e-3)) for _ in range(2))
    assert jax.tree.structure(one) != jax.tree.structure(two)


# ------------------------------------------------------------------------------------------ every agent
QRL = dict(encoder_hidden=(8,), latent_dim=4, projector_hidden=(8,), iqe_components=2, iqe_dim_per_component=4,
           dynamics_hidden=(8,))
# name -> (agent class, config built anew on every call, batch). The world models are the recorded cases' of
# tests/fixtures/update_fixtures.py (on their batches' shapes): their creates compile once per suite.
AGENTS = {
    "qrl": (QRLAgent, lambda: QRLConfig(**QRL, cosine_decay_steps=100, general_goal=(0.0,) * 3), "discrete"),
    "qrl_continuous": (QRLContinuousAgent, lambda: QRLContinuousConfig(obs_dim=3, action_dim=2, actor_hidden=(8,),
                                                                       **QRL), "goal"),
    "crl": (CRLAgent, lambda: CRLConfig(obs_dim=3, action_dim=2, hidden=(8,), repr_dim=4, actor_hidden=(8,)), "goal"),
    "gcbc": (GCBCAgent, lambda: GCBCConfig(obs_dim=3, action_dim=2, hidden=(8,)), "goal"),
    "ddpg_her": (DDPGHERAgent, lambda: DDPGHERConfig(obs_dim=3, action_dim=2, goal_dims=(0, 1), hidden=(8,),
                                                     latent_dim=8), "goal"),
    "denoised_sac": (DenoisedMDPAgent, lambda: update_fixtures.world_model_config(policy="sac"), "sequences"),
    "dreamer": (DenoisedMDPAgent, lambda: update_fixtures.world_model_config(dreamer=True), "sequences"),
}


def _batch(kind, b=4):
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    if kind == "sequences":
        return update_fixtures.world_model_sequences()[0]  # 3 sequences of 4 steps
    batch = dict(observations=f(b, 3), next_observations=f(b, 3), goals=f(b, 3), actions=np.tanh(f(b, 2)),
                 rewards=-np.ones(b, np.float32))
    if kind == "discrete":
        batch = dict(batch, actions=rng.integers(-1, 2, b).astype(np.int32))
        del batch["goals"]
    return batch


@pytest.mark.parametrize("name", list(AGENTS))
def test_equal_configs_give_equal_structures_for_scan_and_vmap(name):
    """Traced only (no compilation): agents from two equal (not identical) configs share one tree structure,
    updates run as a ``lax.scan`` carry and under ``vmap`` over seeds."""
    cls, config, kind = AGENTS[name]
    first, second = config(), config()
    assert first == second and first is not second
    agent = jax.eval_shape(lambda: cls.create(first, 0))
    # A typed key is traced anew (not the cached trace of ``create``): only the cached optimizers make it equal.
    other = jax.eval_shape(lambda: cls.create(second, jax.random.key(1)))
    assert jax.tree.structure(agent) == jax.tree.structure(other)
    batch = _batch(kind)
    scanned = jax.eval_shape(lambda a, b: jax.lax.scan(lambda a, _: (a.update(b)[0], None), a, length=2)[0],
                             agent, batch)
    assert jax.tree.structure(scanned) == jax.tree.structure(agent)
    seeds = jax.eval_shape(lambda b: jax.vmap(lambda s: cls.update(cls.create(second, s), b)[0])(jnp.arange(3)),
                           batch)
    assert jax.tree.structure(seeds) == jax.tree.structure(agent)
    assert all(leaf.shape[0] == 3 for leaf in jax.tree.leaves(seeds))


@pytest.mark.parametrize("name", ["qrl", "dreamer"])
def test_a_checkpoint_restores_into_a_fresh_agent(name, tmp_path):
    cls, config, kind = AGENTS[name]
    # Every float leaf moved off its initial value (as training moves it; that an update keeps the structure is the
    # test above's), without compiling an update (a Dreamer update takes ~20 s to compile on 2 cores).
    agent = jax.tree.map(lambda x: x + 0.5 if jnp.issubdtype(x.dtype, jnp.floating) else x, cls.create(config(), 0))
    fresh = cls.create(dataclasses.replace(config()), 1)  # another seed: the same compiled create
    assert jax.tree.structure(fresh) == jax.tree.structure(agent)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "agent", agent)
        checkpointer.wait_until_finished()
        restored = checkpointer.restore(tmp_path / "agent", jax.tree.map(ocp.utils.to_shape_dtype_struct, fresh))
    assert jax.tree.structure(restored) == jax.tree.structure(agent)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(agent)):
        np.testing.assert_array_equal(a, b)
