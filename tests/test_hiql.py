"""HIQL: what each loss may move (the value and phi by the value loss alone, each actor by its own batch entries),
the targets' averaging, the representation's length, a value that learns a chain's step count through phi, acting
and bad input. (The value and AWR losses are GCIVL's, checked by hand in tests/test_gcivl.py.)"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl import agents
from platonic_rl.agents.gcivl import gaussian_log_prob
from platonic_rl.agents.hiql import HIQLAgent, HIQLConfig, normalise
from test_gcivl import chain_values, spearman  # the chain both values learn (tests/test_gcivl.py)

TINY = HIQLConfig(obs_dim=1, action_dim=1, value_hidden=(32, 32), actor_hidden=(16,), rep_dim=4, subgoal_steps=3)


def _batch(seed: int = 0, n: int = 8) -> dict:
    rng = np.random.default_rng(seed)
    states = lambda: rng.normal(size=(n, 1)).astype(np.float32)  # noqa: E731
    return dict(observations=states(), actions=rng.uniform(-1, 1, (n, 1)), next_observations=states(),
                goals=states(), subgoals=states(), bc_goals=states(), bc_subgoals=states(), rewards=-np.ones(n))


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_each_loss_moves_only_its_own_networks():
    agent, batch = HIQLAgent.create(TINY, 0), _batch()
    update = jax.jit(HIQLAgent.update)
    new, metrics = update(agent, batch)
    # Actions enter the low actor's loss only; the high actor's goals and targets its loss only.
    other_actions, _ = update(agent, {**batch, "actions": -batch["actions"]})
    other_high, _ = update(agent, {**batch, "bc_goals": batch["goals"], "bc_subgoals": batch["subgoals"]})
    assert _same(other_actions.value_state, new.value_state) and _same(other_actions.high_actor_state,
                                                                       new.high_actor_state)
    assert not _same(other_actions.low_actor_state, new.low_actor_state)
    assert _same(other_high.value_state, new.value_state) and _same(other_high.low_actor_state, new.low_actor_state)
    assert not _same(other_high.high_actor_state, new.high_actor_state)
    # phi is trained (by the value loss); the targets average the value MLPs only.
    assert not _same(new.value_state.params["rep"], agent.value_state.params["rep"])
    expected = jax.tree.map(lambda old, online: (1 - TINY.tau) * old + TINY.tau * online, agent.target_value_params,
                            new.value_state.params["values"])
    for x, y in zip(jax.tree.leaves(new.target_value_params), jax.tree.leaves(expected)):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
    assert {"value_loss", "low_actor_loss", "high_actor_loss", "high_advantage"} <= set(metrics)
    # The high actor regresses onto phi([s; w]) of its target w, the low actor onto the dataset's action.
    s = batch["observations"]
    high = gaussian_log_prob(agent.subgoal(s, batch["bc_goals"]), agent.rep(s, batch["bc_subgoals"]))
    assert float(metrics["high_bc_log_prob"]) == pytest.approx(float(high.mean()), rel=1e-5)
    reps = new.rep(batch["observations"], batch["goals"])
    np.testing.assert_allclose(np.linalg.norm(reps, axis=-1), 2.0, rtol=1e-5)  # sqrt(rep_dim = 4)
    np.testing.assert_allclose(np.linalg.norm(normalise(jnp.array([[3.0, 4.0]])), axis=-1), np.sqrt(2), rtol=1e-6)
    actions = new.act(batch["observations"], batch["goals"])
    assert actions.shape == (8, 1) and float(jnp.abs(actions).max()) <= 1.0
    assert not np.array_equal(new.act(batch["observations"], batch["goals"], rng=1), actions)
    assert agents.make("hiql", obs_dim=1, action_dim=1, value_hidden=(4,), actor_hidden=(4,)).config.expectile == 0.7


@pytest.mark.slow  # ~13 s; the value machinery beyond phi is GCIVL's, whose chain test runs by default
def test_the_value_learns_the_step_count_through_its_representation():
    """Random walks on 0..9 with OGBench's HIQL goals: after 1,500 updates the value V(s, phi([s; g])) orders goals
    by their true step count (Spearman > 0.9)."""
    config = dataclasses.replace(TINY, discount=0.9, learning_rate=1e-3)
    v, steps = chain_values(HIQLAgent, config, subgoal_steps=config.subgoal_steps)
    assert spearman(-v, steps) > 0.9


def test_bad_input_is_refused_naming_it():
    agent = HIQLAgent.create(TINY, 0)
    batch = _batch()
    with pytest.raises(ValueError, match=r"batch\['subgoals'\] must have shape \[B, 1\] \(missing: SegmentGoalSampler"):
        agent.update({k: v for k, v in batch.items() if k != "subgoals"})
    for field, value, message in (("expectile", 0.0, "expectile must be in"), ("rep_dim", 0, "rep_dim must be >= 1"),
                                  ("high_temperature", -1.0, "AWR temperatures")):
        with pytest.raises(ValueError, match=message):
            dataclasses.replace(TINY, **{field: value})
