"""DDPG + HER: reward relabelling, target clipping, Polyak averaging, quasimetric critics."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.ddpg_her import Critic, DDPGHERAgent, DDPGHERConfig, goal_reward

TINY = DDPGHERConfig(obs_dim=4, action_dim=2, goal_dims=(0, 1), hidden=(32,), latent_dim=64)


def batch(n=16, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4)).astype(np.float32)
    nxt = obs + 0.1
    goals = np.where(np.arange(n)[:, None] < n // 2, nxt, rng.normal(size=(n, 4))).astype(np.float32)
    goals[:, 2:] = 0.0  # goal states: zeros outside the goal dimensions
    return dict(observations=obs, actions=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                next_observations=nxt, goals=goals)


def test_goal_reward_compares_goal_dimensions_only():
    nxt = jnp.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    goals = jnp.array([[1.0, 2.0, 0.0, 0.0], [1.0, 2.5, 0.0, 0.0]])
    # compiled once: op by op, each primitive was compiled on its own
    np.testing.assert_array_equal(jax.jit(goal_reward, static_argnums=2)(nxt, goals, (0, 1)), [0.0, -1.0])


@pytest.mark.parametrize("critic", ["mlp", "mrn", "iqe"])
def test_update_and_target_networks(critic):
    import dataclasses
    agent = DDPGHERAgent.create(dataclasses.replace(TINY, critic=critic), 0)
    new, metrics = jax.jit(DDPGHERAgent.update)(agent, batch())
    assert float(metrics["reward"]) == pytest.approx(-0.5)  # half the goals are the next states
    assert all(np.isfinite(v) for v in metrics.values())
    # Polyak: target = 0.95 target + 0.05 online.
    online, target, old = (jax.tree.leaves(p)[-1] for p in (new.critic_params, new.target_critic_params,
                                                             agent.target_critic_params))
    np.testing.assert_allclose(target, 0.95 * old + 0.05 * online, rtol=1e-5, atol=1e-7)
    a = new.act(batch()["observations"], batch()["goals"])
    assert a.shape == (16, 2) and np.all(np.abs(a) <= 1)


def test_critic_target_is_clipped_to_the_return_range():
    agent = DDPGHERAgent.create(TINY, 0)
    b = batch()
    online_q = jax.jit(Critic(TINY).apply)(agent.critic_params, b["observations"], b["actions"], b["goals"])
    critic_loss = jax.jit(lambda agent, b: agent.critic_loss(agent.critic_params, b))
    for constant, clipped_target in ((10.0, 0.0), (-1e4, -1.0 / (1 - TINY.gamma))):
        target = jax.tree.map(jnp.zeros_like, agent.target_critic_params)
        target["params"]["MLP_0"]["Dense_1"]["bias"] = jnp.array([constant])  # Q' = constant everywhere
        loss, _ = critic_loss(agent.replace(target_critic_params=target), b)
        assert float(loss) == pytest.approx(float(jnp.mean(jnp.square(online_q - clipped_target))), rel=1e-5)


def test_bad_config():
    with pytest.raises(ValueError, match="critic"):
        DDPGHERConfig(critic="pqe")
    with pytest.raises(ValueError, match="goal_dims"):
        DDPGHERConfig(obs_dim=3, goal_dims=(5,))
