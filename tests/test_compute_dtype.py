"""compute_dtype: networks in bfloat16, parameters / optimizer state / IQE / losses in float32."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents import (CRLAgent, CRLConfig, DDPGHERAgent, DDPGHERConfig, DenoisedMDPAgent,
                                DenoisedMDPConfig, GCBCAgent, GCBCConfig, QRLAgent, QRLConfig, QRLContinuousAgent,
                                QRLContinuousConfig)
from platonic_rl.benchmarks.timing import discrete_batch, goal_batch, matmul_flops, sequence_batch
from platonic_rl.denoised.model import WorldModelConfig

TINY = dict(encoder_hidden=(64,), latent_dim=32, projector_hidden=(64,), iqe_components=8, iqe_dim_per_component=8,
            dynamics_hidden=(64,))
CASES = {
    "qrl_continuous": (lambda dt: QRLContinuousAgent.create(
        QRLContinuousConfig(**TINY, actor_hidden=(64,), compute_dtype=dt), 0),
        lambda s: goal_batch(128, 10, 4, s)),
    "qrl": (lambda dt: QRLAgent.create(QRLConfig(**TINY, compute_dtype=dt, cosine_decay_steps=None), 0),
            lambda s: discrete_batch(128, 3, 3, s)),
    "denoised_mdp": (lambda dt: DenoisedMDPAgent.create(DenoisedMDPConfig(
        model=WorldModelConfig(obs_shape=(5,), action_dim=2, x_belief=32, x_state=8, y_belief=16, y_state=4, hidden=32,
                               embed_dim=32, mlp_encoder_hidden=(32,), mlp_decoder_hidden=(32,), compute_dtype=dt),
        actor_hidden=(32,), critic_hidden=(32,), horizon=4, imagine_starts=16), 0),
        lambda s: sequence_batch(8, 6, 5, 2, s)),
    "crl": (lambda dt: CRLAgent.create(CRLConfig(hidden=(64,), actor_hidden=(64,), compute_dtype=dt), 0),
            lambda s: goal_batch(128, 10, 4, s)),
    "gcbc": (lambda dt: GCBCAgent.create(GCBCConfig(hidden=(64,), compute_dtype=dt), 0),
             lambda s: goal_batch(128, 10, 4, s)),
    "ddpg_her": (lambda dt: DDPGHERAgent.create(DDPGHERConfig(hidden=(64,), compute_dtype=dt), 0),
                 lambda s: goal_batch(128, 10, 4, s)),
}


def _dot_dtypes(jaxpr) -> set:
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.add(str(eqn.invars[0].aval.dtype))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(sub, "eqns") or hasattr(sub, "jaxpr"):
                    found |= _dot_dtypes(sub)
    return found


@pytest.mark.slow  # three updates compiled twice per agent (~20-40 s each); the default suite checks the dtypes below
@pytest.mark.parametrize("name", sorted(CASES))
def test_bfloat16_losses_track_float32_over_a_few_updates(name):
    make, batch = CASES[name]
    history = {}
    for dtype in ("float32", "bfloat16"):
        agent = make(dtype)
        update = jax.jit(type(agent).update)
        history[dtype] = []
        for step in range(3):
            agent, metrics = update(agent, jax.tree.map(jnp.asarray, batch(step)))
            history[dtype].append({k: float(v) for k, v in metrics.items()})
        # Parameters and optimizer state stay float32.
        leaves = [x for x in jax.tree_util.tree_leaves(agent) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
        assert {str(jnp.asarray(x).dtype) for x in leaves} == {"float32"}
        # The matmuls run in the compute dtype: bf16 operands in bfloat16's update, none in float32's.
        dots = _dot_dtypes(jax.make_jaxpr(type(agent).update)(agent, jax.tree.map(jnp.asarray, batch(0))))
        assert ("bfloat16" in dots) == (dtype == "bfloat16"), dots
    # bfloat16 keeps 8 significant bits (relative rounding 2^-9 per op). Losses and distances (sizes 0.05-16) stay
    # within 2% + 0.01 of float32 over three updates (measured: within 0.3% + 0.002); gradient norms, which sum
    # squares of many rounded terms, within 5% + 0.01 (measured: 3% for the discrete QRL's).
    for f32, bf16 in zip(history["float32"], history["bfloat16"]):
        for key, value in f32.items():
            rtol = 0.02 if ("loss" in key or "distance" in key) else 0.05
            assert abs(bf16[key] - value) <= rtol * abs(value) + 0.01, (key, value, bf16[key])


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_bfloat16_update_multiplies_in_bfloat16_and_keeps_float32_state(name):
    make, batch = CASES[name]
    arrays = jax.tree.map(jnp.asarray, batch(0))
    for dtype in ("float32", "bfloat16"):
        agent = jax.eval_shape(lambda: make(dtype))  # the agent's shapes and dtypes: nothing is compiled
        # Tracing only (no compile): the update's matmuls take bf16 operands exactly when asked to.
        dots = _dot_dtypes(jax.make_jaxpr(type(agent).update)(agent, arrays))
        assert ("bfloat16" in dots) == (dtype == "bfloat16"), dots
        shapes = jax.eval_shape(type(agent).update, agent, arrays)
        assert {str(x.dtype) for x in jax.tree_util.tree_leaves(shapes)
                if jnp.issubdtype(x.dtype, jnp.floating)} == {"float32"}  # new state and metrics: float32


def test_bfloat16_update_has_the_same_matmul_flops():
    make, batch = CASES["qrl_continuous"]
    counts = [matmul_flops(jax.make_jaxpr(type(a).update)(a, jax.tree.map(jnp.asarray, batch(0))))
              for a in (jax.eval_shape(lambda: make("float32")), jax.eval_shape(lambda: make("bfloat16")))]
    assert counts[0] == counts[1] > 0


def test_unknown_compute_dtype_is_rejected():
    with pytest.raises(ValueError, match=r"QRLContinuousConfig\.compute_dtype must be one of \['bfloat16', 'float32'\]"):
        QRLContinuousConfig(compute_dtype="float16")
    with pytest.raises(ValueError, match=r"QRLConfig\.compute_dtype"):
        QRLConfig(compute_dtype="bf16")
    with pytest.raises(ValueError, match=r"WorldModelConfig\.compute_dtype"):
        WorldModelConfig(compute_dtype="float64")
    for config in (CRLConfig, GCBCConfig, DDPGHERConfig):
        with pytest.raises(ValueError, match=rf"{config.__name__}\.compute_dtype must be one of"):
            config(compute_dtype="float16")


def test_dreamer_keeps_the_model_compute_dtype():
    config = DenoisedMDPConfig.dreamer(WorldModelConfig(compute_dtype="bfloat16"))
    assert config.model.compute_dtype == "bfloat16"


@pytest.mark.slow  # two compiles of the filter scan (~15 s)
def test_world_model_filters_in_bfloat16_with_float32_beliefs():
    from platonic_rl.denoised.model import init_params, observe

    configs = {dt: WorldModelConfig(obs_shape=(5,), action_dim=2, x_belief=32, x_state=8, y_belief=16, y_state=4,
                                    hidden=32, embed_dim=32, mlp_encoder_hidden=(32,), mlp_decoder_hidden=(32,),
                                    compute_dtype=dt) for dt in ("float32", "bfloat16")}
    params = init_params(configs["float32"], jax.random.PRNGKey(0))  # the same float32 parameters for both
    batch = jax.tree.map(jnp.asarray, sequence_batch(4, 6, 5, 2))
    out = {dt: jax.jit(lambda p, o, a, c=c: observe(c, p, o, a, jax.random.PRNGKey(1)))(
        params, batch["observations"], batch["prev_actions"]) for dt, c in configs.items()}
    states = {dt: out[dt][0] for dt in out}
    assert all(v.dtype == jnp.float32 for v in jax.tree_util.tree_leaves(out["bfloat16"]))
    # Beliefs are tanh-bounded GRU states: bf16 rounding (2^-9 relative per op) over 6 recurrent steps stays
    # within 0.05 of float32 (measured ~0.01); the posterior samples add noise scaled by std >= 0.1 alike.
    np.testing.assert_allclose(states["bfloat16"]["hx"], states["float32"]["hx"], atol=0.05)
    assert float(jnp.abs(states["bfloat16"]["hx"] - states["float32"]["hx"]).max()) > 0  # bf16 really ran
