"""Contrastive RL: the critic learns to pick each row's goal; the actor follows the critic."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.crl import CRLAgent, CRLConfig

TINY = CRLConfig(obs_dim=3, action_dim=2, hidden=(64,), repr_dim=16, actor_hidden=(32,), critic_learning_rate=3e-3)


def test_critic_learns_to_match_goals_to_transitions():
    """Goals are a deterministic function of (s, a): the contrastive critic must identify them."""
    rng = np.random.default_rng(0)
    update = jax.jit(CRLAgent.update)
    agent = CRLAgent.create(TINY, 0)
    for step in range(300):
        obs = rng.normal(size=(64, 3)).astype(np.float32)
        actions = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
        goals = obs + np.pad(actions, ((0, 0), (0, 1)))
        agent, metrics = update(agent, dict(observations=obs, actions=actions, goals=goals))
        if step == 0:
            first = float(metrics["critic_loss"])
    assert float(metrics["critic_loss"]) < 0.5 * first
    assert float(metrics["categorical_accuracy"]) > 0.6  # chance: 1/64


def test_infonce_variant_bad_config_and_act():
    agent = CRLAgent.create(CRLConfig(obs_dim=3, action_dim=2, hidden=(16,), repr_dim=4, actor_hidden=(8,),
                                      objective="infonce"), 1)
    batch = dict(observations=jnp.ones((8, 3)), actions=jnp.zeros((8, 2)), goals=jnp.ones((8, 3)))
    _, metrics = jax.jit(CRLAgent.update)(agent, batch)  # compiled: run op by op, it took 12 s of compiles
    assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["actor_loss"])
    a = jax.jit(CRLAgent.act)(agent, jnp.ones((5, 3)), jnp.zeros(3), jax.random.PRNGKey(0))
    assert a.shape == (5, 2) and np.all(np.abs(a) <= 1)
    with pytest.raises(ValueError, match="objective"):
        CRLConfig(objective="nce")
    with pytest.raises(ValueError, match="missing keys"):
        agent.update(dict(observations=jnp.ones((8, 3))))
