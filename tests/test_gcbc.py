"""GCBC: log-density of given actions, and cloning a goal-conditioned expert."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.common.policies import tanh_normal_log_prob, tanh_normal_sample


def test_log_prob_of_given_actions_matches_the_sampler():
    mean, log_std = jnp.array([[0.2, -0.4]]), jnp.array([[-1.0, 0.3]])
    a, log_p = tanh_normal_sample(jax.random.PRNGKey(3), mean, log_std)
    assert float(tanh_normal_log_prob(mean, log_std, a)[0]) == pytest.approx(float(log_p[0]), rel=1e-4)
    u = np.arctanh(0.5)
    ref = stats.norm.logpdf(u, 0.0, 1.0) - np.log(1 - 0.25)
    assert float(tanh_normal_log_prob(jnp.zeros((1,)), jnp.zeros((1,)), jnp.array([0.5]))) == pytest.approx(ref, rel=1e-5)
    assert np.isfinite(tanh_normal_log_prob(jnp.zeros(2), jnp.zeros(2), jnp.array([1.0, -1.0])))


def test_clones_a_goal_directed_expert():
    rng = np.random.default_rng(0)
    agent = GCBCAgent.create(GCBCConfig(obs_dim=2, action_dim=2, hidden=(64, 64), learning_rate=3e-3), 0)
    update = jax.jit(GCBCAgent.update)
    for _ in range(400):
        obs = rng.uniform(-1, 1, (128, 2)).astype(np.float32)
        goals = rng.uniform(-1, 1, (128, 2)).astype(np.float32)
        expert = np.clip(goals - obs, -0.9, 0.9).astype(np.float32)
        agent, metrics = update(agent, dict(observations=obs, goals=goals, actions=expert))
    assert float(metrics["action_error"]) < 0.1
    with pytest.raises(ValueError, match="actions"):
        agent.update(dict(observations=obs, goals=goals, actions=np.zeros((128, 3), np.float32)))
