"""GCBC: log-density of given actions, and cloning a goal-conditioned expert."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.common.policies import tanh_normal_log_prob, tanh_normal_sample

# Compiled once per shapes (shared by the tests): op by op, each primitive was compiled on its own.
log_prob = jax.jit(tanh_normal_log_prob)


def test_log_prob_of_given_actions_matches_the_sampler():
    mean, log_std = jnp.array([[0.2, -0.4]]), jnp.array([[-1.0, 0.3]])
    a, log_p = jax.jit(tanh_normal_sample)(jax.random.PRNGKey(3), mean, log_std)
    assert float(log_prob(mean, log_std, a)[0]) == pytest.approx(float(log_p[0]), rel=1e-4)
    u = np.arctanh(0.5)
    ref = stats.norm.logpdf(u, 0.0, 1.0) - np.log(1 - 0.25)
    assert float(log_prob(jnp.zeros((1,)), jnp.zeros((1,)), jnp.array([0.5]))) == pytest.approx(ref, rel=1e-5)
    assert np.isfinite(log_prob(jnp.zeros(2), jnp.zeros(2), jnp.array([1.0, -1.0])))


def test_saturated_actions_are_scored_by_the_tail_mass_beyond_the_threshold():
    # At a = +-1 the log-probability is log P(u beyond atanh(0.999)) - log(0.001), u ~ N(mu, sigma) (hand-checked
    # with scipy); just inside the threshold it is the squashed density.
    mean, log_std = jnp.array([0.3, -0.2]), jnp.array([0.1, -0.5])
    edge, width = np.arctanh(0.999), np.log(0.001)
    right = stats.norm.logsf(edge, 0.3, np.exp(0.1)) - width
    left = stats.norm.logcdf(-edge, -0.2, np.exp(-0.5)) - width
    got = float(log_prob(mean, log_std, jnp.array([1.0, -1.0])))
    assert got == pytest.approx(right + left, rel=1e-5)
    inside = jnp.array([0.99, -0.99])
    ref = sum(stats.norm.logpdf(np.arctanh(x), m, np.exp(s)) - np.log(1 - x * x)
              for x, m, s in zip([0.99, -0.99], [0.3, -0.2], [0.1, -0.5]))
    assert float(log_prob(mean, log_std, inside)) == pytest.approx(ref, rel=1e-5)


def test_saturated_actions_do_not_reward_a_vanishing_std():
    # The tail-mass score of a = 1 is at most -log(0.001) = 6.91 whatever mu and sigma; a mean past the threshold
    # reaches it with sigma = 1 already, and then shrinking sigma gains nothing (its gradient is ~0).
    means, log_stds = np.meshgrid(np.linspace(-2, 12, 57), np.linspace(-5, 2, 29))
    scores = log_prob(jnp.asarray(means)[..., None], jnp.asarray(log_stds)[..., None], jnp.ones((1,)))
    assert float(scores.max()) <= -np.log(0.001) + 1e-4
    assert float(log_prob(jnp.array([10.0]), jnp.array([0.0]), jnp.array([1.0]))) > -np.log(0.001) - 1e-3
    grad_std = jax.jit(jax.grad(lambda s: tanh_normal_log_prob(jnp.array([10.0]), s, jnp.array([1.0]))))(
        jnp.array([0.0]))
    assert abs(float(grad_std[0])) < 1e-6
    grads = jax.jit(jax.grad(lambda m, s: tanh_normal_log_prob(m, s, jnp.array([1.0, -1.0])), argnums=(0, 1)))(
        jnp.array([0.0, 0.0]), jnp.array([0.0, 0.0]))
    assert all(np.isfinite(g).all() for g in grads) and float(grads[0][0]) > 0 > float(grads[0][1])


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
