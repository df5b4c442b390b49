"""GCIVL: its losses against values computed by hand, the update's target averaging, a value that learns the step
count on a chain, acting, determinism and bad input."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl import agents
from platonic_rl.agents.gcivl import (GCIVLAgent, GCIVLConfig, awr_actor_loss, expectile_loss, gaussian_log_prob,
                                      gcivl_value_loss)
from platonic_rl.envs.replay import SegmentGoalSampler

TINY = GCIVLConfig(obs_dim=1, action_dim=1, value_hidden=(32, 32), actor_hidden=(16,))


def test_expectile_and_value_losses_by_hand():
    # weight 0.9 where the advantage is >= 0, 0.1 below; squared differences 4 and 4
    np.testing.assert_allclose(expectile_loss(jnp.array([1.0, -1.0]), jnp.array([2.0, 2.0]), 0.9), [3.6, 0.4])
    # two rows, two networks; gamma 0.5
    values = jnp.array([[-1.0, 0.0], [-2.0, 1.0]])          # V_i(s, g)
    target = jnp.array([[-1.0, -1.0], [-3.0, 1.0]])         # V_i^target(s, g): means -2, 0
    next_target = jnp.array([[-2.0, 0.0], [-4.0, 2.0]])     # V_i^target(s', g): mins -4, 0
    rewards, masks = jnp.array([-1.0, 0.0]), jnp.array([1.0, 0.0])
    # row 0: A = -1 + 0.5 (-4) - (-2) = -1 (weight 0.1); y_1 = -1 + 0.5 (-2) = -2, y_2 = -1 + 0.5 (-4) = -3
    #   d_1 = -2 - (-1) = -1, d_2 = -3 - (-2) = -1
    # row 1 (reached, mask 0): A = 0 - 0 = 0 (weight 0.9); y = 0; d_1 = 0 - 0 = 0, d_2 = 0 - 1 = -1
    # network 1: mean(0.1 x 1, 0.9 x 0) = 0.05; network 2: mean(0.1 x 1, 0.9 x 1) = 0.5
    loss, metrics = gcivl_value_loss(values, target, next_target, rewards, masks, 0.5, 0.9)
    assert float(loss) == pytest.approx(0.55) and float(metrics["v_mean"]) == pytest.approx(-0.5)


def test_awr_weights_are_clipped_and_the_values_get_no_gradient():
    log_probs = jnp.array([-1.0, -2.0])
    values = jnp.array([[0.0, 0.0], [0.0, 0.0]])
    next_values = jnp.array([[0.1, 1.0], [0.1, 1.0]])      # advantages 0.1 and 1.0
    # alpha 10: weights e^1 and min(e^10, 100) = 100
    loss, metrics = awr_actor_loss(log_probs, values, next_values, 10.0, 100.0)
    assert float(loss) == pytest.approx(-(np.e * -1.0 + 100.0 * -2.0) / 2, rel=1e-6)
    assert float(metrics["advantage"]) == pytest.approx(0.55)
    grad = jax.grad(lambda v: awr_actor_loss(log_probs, v, next_values, 10.0, 100.0)[0])(values)
    np.testing.assert_array_equal(grad, 0.0)
    # log N(a; mu, I) = -|a - mu|^2 / 2 - d/2 log(2 pi)
    assert float(gaussian_log_prob(jnp.array([[0.0, 1.0]]), jnp.array([[1.0, 1.0]]))[0]) == pytest.approx(
        -0.5 - np.log(2 * np.pi))


def test_an_update_moves_the_targets_by_tau_and_is_deterministic():
    agent = GCIVLAgent.create(TINY, 0)
    rng = np.random.default_rng(0)
    batch = dict(observations=rng.normal(size=(8, 1)), actions=rng.uniform(-1, 1, (8, 1)),
                 next_observations=rng.normal(size=(8, 1)), goals=rng.normal(size=(8, 1)), rewards=-np.ones(8))
    update = jax.jit(GCIVLAgent.update)
    new, metrics = update(agent, batch)
    again, _ = update(agent, batch)
    expected = jax.tree.map(lambda old, online: (1 - TINY.tau) * old + TINY.tau * online, agent.target_value_params,
                            new.value_state.params)
    for x, y in zip(jax.tree.leaves(new.target_value_params), jax.tree.leaves(expected)):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(again)))
    assert set(metrics) == {"value_loss", "v_mean", "v_min", "v_max", "actor_loss", "advantage", "bc_log_prob",
                            "action_mse"}
    actions = new.act(batch["observations"], batch["goals"], rng=1)
    assert actions.shape == (8, 1) and float(jnp.abs(actions).max()) <= 1.0
    assert agents.make("gcivl", obs_dim=1, action_dim=1, value_hidden=(4,), actor_hidden=(4,)).config.expectile == 0.9


def chain_walks() -> dict:
    """40 random walks of 20 steps on the states 0..9 (a step of +-1, clipped), as flat transitions scaled to [0, 1]."""
    rng = np.random.default_rng(0)
    positions, actions = [], []
    for _ in range(40):
        x = rng.integers(0, 10)
        for _ in range(20):
            a = rng.choice([-1.0, 1.0])
            positions.append(x)
            actions.append(a)
            x = int(np.clip(x + a, 0, 9))
        positions.append(x)
    walks = np.asarray(positions, np.float32).reshape(40, 21)
    return dict(observations=walks[:, :-1].reshape(-1, 1) / 9, next_observations=walks[:, 1:].reshape(-1, 1) / 9,
                actions=np.asarray(actions, np.float32).reshape(-1, 1), segment_end=np.tile(np.arange(20) == 19, 40))


def chain_values(agent_class, config, **sampling) -> tuple[np.ndarray, np.ndarray]:
    """The mean value V(s, g) over every pair of the chain's states after 1,500 updates on :func:`chain_walks` with
    OGBench's value goals (and ``sampling``), and the pairs' true step counts: ``(values [100], steps [100])``."""
    sampler = SegmentGoalSampler.create(chain_walks(), 256, p_future=0.5, p_current=0.2, bc_goals=True,
                                        bc_future="uniform", **sampling)

    # Long enough to be worth LLVM's optimisations (the suite compiles at level 0: tests/conftest.py): 5 s against 14.
    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 2})
    def train(agent, key):
        return jax.lax.scan(lambda a, k: (a.update(sampler.sample(k))[0], None), agent, jax.random.split(key, 1500))[0]

    agent = train(agent_class.create(config, 0), jax.random.PRNGKey(1))
    s, g = np.meshgrid(np.arange(10), np.arange(10))
    v = np.asarray(agent.values(jnp.asarray(s.reshape(-1, 1) / 9, jnp.float32),
                                jnp.asarray(g.reshape(-1, 1) / 9, jnp.float32)).mean(0))
    return v, np.abs(s - g).reshape(-1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    return float(np.corrcoef(rank(a), rank(b))[0, 1])


def test_the_value_learns_the_step_count_on_a_chain():
    """Random walks on 0..9 with OGBench's value goals: after 1,500 updates the value's order of goals by distance
    matches the true step count's (Spearman > 0.9) and a reached goal is worth ~0."""
    v, steps = chain_values(GCIVLAgent, dataclasses.replace(TINY, discount=0.9, learning_rate=1e-3))
    assert spearman(-v, steps) > 0.9
    assert np.abs(v[steps == 0]).max() < 0.5 and v[steps == 9].mean() < -3


def test_bad_input_is_refused_naming_it():
    agent = GCIVLAgent.create(TINY, 0)
    good = dict(observations=np.zeros((2, 1)), actions=np.zeros((2, 1)), next_observations=np.zeros((2, 1)),
                goals=np.zeros((2, 1)), rewards=-np.ones(2))
    with pytest.raises(ValueError, match=r"batch\['goals'\] must have shape \[B, 1\], got \(2, 3\)"):
        agent.update({**good, "goals": np.zeros((2, 3))})
    with pytest.raises(ValueError, match=r"batch\['rewards'\] is missing"):
        agent.update({k: v for k, v in good.items() if k != "rewards"})
    for field, value, message in (("expectile", 1.0, "expectile must be in"), ("tau", 0.0, "tau must be in"),
                                  ("awr_temperature", -1.0, "awr_temperature must be"), ("obs_dim", 0, "obs_dim")):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(TINY, **{field: value})
