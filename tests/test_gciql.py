"""GCIQL: its losses against values computed by hand and where their gradients go, the update's target averaging,
a value that learns the step count on a chain, acting, determinism and bad input."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_gcivl import chain_walks, spearman  # tests/test_gcivl.py: the chain both value learners learn

from platonic_rl import agents
from platonic_rl.agents.gciql import (GCIQLAgent, GCIQLConfig, ddpg_bc_actor_loss, gciql_critic_loss,
                                      gciql_value_loss)
from platonic_rl.envs.replay import SegmentGoalSampler

TINY = GCIQLConfig(obs_dim=1, action_dim=1, value_hidden=(32, 32), actor_hidden=(16,))


def test_value_and_critic_losses_by_hand():
    # value: min_i Q_i^target = (-2, 2) against V = (-1, 0): d = (-1, 2), weights 0.1 and 0.9 -> mean(0.1, 3.6)
    loss, metrics = gciql_value_loss(jnp.array([-1.0, 0.0]), jnp.array([[-2.0, 2.0], [-1.0, 3.0]]), 0.9)
    assert float(loss) == pytest.approx(1.85) and float(metrics["v_mean"]) == pytest.approx(-0.5)
    # critics, gamma 0.5: y = (-1 + 0.5 x -4, 0 + 0) = (-3, 0); Q_1 = (-1, 0): errors 4, 0; Q_2 = (-3, 2): 0, 4
    qs, next_values = jnp.array([[-1.0, 0.0], [-3.0, 2.0]]), jnp.array([-4.0, 7.0])
    rewards, masks = jnp.array([-1.0, 0.0]), jnp.array([1.0, 0.0])
    loss, metrics = gciql_critic_loss(qs, next_values, rewards, masks, 0.5)
    assert float(loss) == pytest.approx(2.0 + 2.0) and float(metrics["q_min"]) == -3.0
    # the target is fixed: no gradient to V(s', g)
    grad = jax.grad(lambda v: gciql_critic_loss(qs, v, rewards, masks, 0.5)[0])(next_values)
    np.testing.assert_array_equal(grad, 0.0)


def test_ddpg_bc_normalises_the_q_term_by_its_magnitude_without_a_gradient_through_it():
    policy_qs = jnp.array([[-2.0, -4.0], [-1.0, -6.0]])     # min over critics: (-2, -6), mean -4, mean |q| 4
    log_probs = jnp.array([-1.0, -3.0])                     # mean -2
    loss, metrics = ddpg_bc_actor_loss(policy_qs, log_probs, 0.5)
    q_loss = 4.0 / (4.0 + 1e-6)
    assert float(metrics["q_loss"]) == pytest.approx(q_loss) and float(metrics["bc_loss"]) == pytest.approx(1.0)
    assert float(loss) == pytest.approx(q_loss + 1.0)
    # d q_loss / d q_i = -1 / (B (mean |q| + 1e-6)) for the critic that is the minimum, 0 for the other
    grad = jax.grad(lambda q: ddpg_bc_actor_loss(q, log_probs, 0.5)[0])(policy_qs)
    np.testing.assert_allclose(grad, [[-1 / (2 * 4.0), 0.0], [0.0, -1 / (2 * 4.0)]], rtol=1e-5)


def test_an_update_moves_the_target_critics_by_tau_and_is_deterministic():
    agent = GCIQLAgent.create(TINY, 0)
    rng = np.random.default_rng(0)
    batch = dict(observations=rng.normal(size=(8, 1)), actions=rng.uniform(-1, 1, (8, 1)),
                 next_observations=rng.normal(size=(8, 1)), goals=rng.normal(size=(8, 1)), rewards=-np.ones(8))
    update = jax.jit(GCIQLAgent.update)
    new, metrics = update(agent, batch)
    again, _ = update(agent, batch)
    expected = jax.tree.map(lambda old, online: (1 - TINY.tau) * old + TINY.tau * online, agent.target_critic_params,
                            new.critic_state.params)
    for x, y in zip(jax.tree.leaves(new.target_critic_params), jax.tree.leaves(expected)):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    for old, moved in ((agent.value_state.params, new.value_state.params),
                       (agent.actor_state.params, new.actor_state.params)):  # every network takes its step
        assert not all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(old), jax.tree.leaves(moved)))
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(again)))
    assert set(metrics) == {"value_loss", "v_mean", "v_min", "v_max", "critic_loss", "q_mean", "q_min", "q_max",
                            "actor_loss", "q_loss", "bc_loss", "bc_log_prob", "action_mse"}
    actions = new.act(batch["observations"], batch["goals"], rng=1)
    assert actions.shape == (8, 1) and float(jnp.abs(actions).max()) <= 1.0
    assert agents.make("gciql", obs_dim=1, action_dim=1, value_hidden=(4,), actor_hidden=(4,)).config.bc_alpha == 0.3


def test_the_value_learns_the_step_count_on_a_chain():
    """Random walks on 0..9 with OGBench's value goals: after 1,500 updates V's order of goals by distance matches
    the true step count's (Spearman > 0.9), the goal itself is worth most and the far end about -4 or less. (Unlike
    GCIVL's, V at the goal is not ~0: a walk that comes back to its state later draws that state as a future goal
    with reward -1, and the critics' squared error averages those with the reached ones' 0, where GCIVL's expectile
    of the value target leans to the 0.)"""
    config = dataclasses.replace(TINY, discount=0.9, learning_rate=1e-3)
    sampler = SegmentGoalSampler.create(chain_walks(), 256, p_future=0.5, p_current=0.2, bc_goals=True,
                                        bc_future="uniform")

    # Long enough to be worth LLVM's optimisations (the suite compiles at level 0: tests/conftest.py).
    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 2})
    def train(agent, key):
        return jax.lax.scan(lambda a, k: (a.update(sampler.sample(k))[0], None), agent, jax.random.split(key, 1500))[0]

    agent = train(GCIQLAgent.create(config, 0), jax.random.PRNGKey(1))
    s, g = np.meshgrid(np.arange(10), np.arange(10))
    v = np.asarray(agent.values(jnp.asarray(s.reshape(-1, 1) / 9, jnp.float32),
                                jnp.asarray(g.reshape(-1, 1) / 9, jnp.float32)))
    steps = np.abs(s - g).reshape(-1)
    assert spearman(-v, steps) > 0.9
    by_steps = [v[steps == k].mean() for k in range(10)]
    assert by_steps[0] == max(by_steps) and by_steps[9] < -3


def test_bad_input_is_refused_naming_it():
    agent = GCIQLAgent.create(TINY, 0)
    good = dict(observations=np.zeros((2, 1)), actions=np.zeros((2, 1)), next_observations=np.zeros((2, 1)),
                goals=np.zeros((2, 1)), rewards=-np.ones(2))
    with pytest.raises(ValueError, match=r"batch\['actions'\] must have shape \[B, 1\], got \(2, 2\)"):
        agent.update({**good, "actions": np.zeros((2, 2))})
    with pytest.raises(ValueError, match=r"batch\['rewards'\] is missing"):
        agent.update({k: v for k, v in good.items() if k != "rewards"})
    for field, value, message in (("expectile", 0.0, "expectile must be in"), ("tau", 1.5, "tau must be in"),
                                  ("bc_alpha", -1.0, "bc_alpha must be finite and >= 0"),
                                  ("action_dim", 0, "action_dim")):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(TINY, **{field: value})


@pytest.mark.slow
def test_the_actor_heads_for_the_goal_on_an_open_plane_of_random_walks():
    """Random walks on an open plane (actions uniform in [-1, 1]^2, each moving the point by 0.05 a), the BC term off
    (alpha 0: behaviour cloning on these hindsight goals alone also heads for the goal): the actor follows its critics'
    action gradient, and after 3,000 updates its mode points towards the goal from random states (mean cosine with
    g - s above 0.8, and 0.3 above the untrained actor's, 0.36 here). A critic gradient that does not reach the
    actor, or points elsewhere, would not."""
    rng = np.random.default_rng(0)
    episodes, steps = 400, 100
    positions = np.zeros((episodes, steps + 1, 2), np.float32)
    positions[:, 0] = rng.uniform(-1, 1, (episodes, 2))
    actions = rng.uniform(-1, 1, (episodes, steps, 2)).astype(np.float32)
    for t in range(steps):
        positions[:, t + 1] = np.clip(positions[:, t] + 0.05 * actions[:, t], -1.5, 1.5)
    data = dict(observations=positions[:, :-1].reshape(-1, 2), next_observations=positions[:, 1:].reshape(-1, 2),
                actions=actions.reshape(-1, 2), segment_end=np.tile(np.arange(steps) == steps - 1, episodes))
    sampler = SegmentGoalSampler.create(data, 256, p_future=0.5, p_current=0.2, bc_goals=True, bc_future="uniform")
    agent = GCIQLAgent.create(GCIQLConfig(obs_dim=2, action_dim=2, bc_alpha=0.0, value_hidden=(128, 128),
                                          actor_hidden=(128, 128)), 0)
    states, goals = rng.uniform(-1, 1, (2, 500, 2)).astype(np.float32)

    def heading(agent):
        a, d = np.asarray(agent.act(states, goals)), goals - states
        return float(np.mean(np.sum(a * d, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(d, axis=1) + 1e-9)))

    untrained = heading(agent)
    update = jax.jit(GCIQLAgent.update)
    for key in jax.random.split(jax.random.PRNGKey(1), 3000):
        agent, _ = update(agent, sampler.sample(key))
    assert heading(agent) > max(0.8, untrained + 0.3), (untrained, heading(agent))
