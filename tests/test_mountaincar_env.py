import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.envs import mountaincar as mc


@pytest.fixture(scope="module")
def table():
    return mc.transition_table()


@pytest.fixture(scope="module")
def dataset():
    return mc.generate_dataset(0)


def test_step_matches_gymnasium_over_random_rollouts():
    env = gym.make("MountainCar-v0").unwrapped
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    step = jax.jit(mc.step)
    worst = 0.0
    for _ in range(40):
        state = np.array([rng.uniform(-1.2, 0.6), rng.uniform(-0.07, 0.07)], np.float32)
        env.state = state.copy()
        ours = state.copy()
        for action in rng.integers(0, 3, 200):
            theirs, *_ = env.step(int(action))
            ours = np.asarray(step(ours, np.int32(action)))
            worst = max(worst, float(np.abs(theirs - ours).max()))
    assert worst < 1e-4
    # One-step agreement from the same state, including the left wall.
    states = np.concatenate([rng.uniform([-1.2, -0.07], [0.6, 0.07], (300, 2)),
                             [[-1.2, -0.05], [-1.19, -0.07], [0.6, 0.07]]]).astype(np.float32)
    for state in states:
        for action in range(3):
            env.state = state.copy()
            theirs, *_ = env.step(action)
            np.testing.assert_allclose(np.asarray(step(state, np.int32(action))), theirs, atol=1e-6)


def test_step_is_batched_and_rejects_bad_input():
    states = jnp.zeros((4, 5, 2))
    assert mc.step(states, jnp.ones((4, 5), jnp.int32)).shape == (4, 5, 2)
    with pytest.raises(TypeError, match="action"):
        mc.step(states, jnp.ones((4, 5)))
    with pytest.raises(ValueError, match="state"):
        mc.step(jnp.zeros((4, 3)), jnp.ones(4, jnp.int32))


def test_discretisation_bins():
    centres = np.asarray(mc.bin_centre(np.stack([np.arange(160)] * 2, -1)))
    np.testing.assert_allclose(centres[0], [-1.2, -0.07])
    np.testing.assert_allclose(centres[-1], [0.6, 0.07], atol=1e-6)
    np.testing.assert_allclose(np.diff(centres, axis=0), np.broadcast_to((1.8 / 159, 0.14 / 159), (159, 2)),
                               rtol=1e-4)
    # Snapping is idempotent, maps to the nearest centre, and round-trips through the flat index.
    np.testing.assert_array_equal(np.asarray(mc.snap(centres)), centres)
    x = np.array([[-1.2 + 1.8 / 159 * 3.4, -0.07 + 0.14 / 159 * 7.6]], np.float32)
    np.testing.assert_array_equal(np.asarray(mc.bin_index(x)), [[3, 8]])
    idx = np.arange(0, mc.NUM_STATES, 97)
    np.testing.assert_array_equal(np.asarray(mc.state_index(mc.state_from_index(idx))), idx)
    assert mc.all_states().shape == (25_600, 2)


def test_transition_table_is_snapped_dynamics(table):
    idx = np.arange(0, mc.NUM_STATES, 131)
    for a in range(3):
        nxt = mc.discrete_step(mc.state_from_index(idx), jnp.full(idx.shape, a, jnp.int32))
        np.testing.assert_array_equal(table[idx, a], np.asarray(mc.state_index(nxt)))


def test_dataset_is_seeded_and_matches_c31(dataset):
    again = mc.generate_dataset(0)
    for field in ("observations", "actions", "next_observations", "rewards"):
        np.testing.assert_array_equal(getattr(dataset, field), getattr(again, field))
    other = mc.generate_dataset(1)
    assert len(other) != len(dataset) or not np.array_equal(other.actions, dataset.actions)

    n_real = len(dataset) - dataset.num_goal_entries
    assert 190_000 < n_real < 210_000  # C.3.1: 199,888 from 1,019 episodes
    assert 200 < dataset.num_goal_entries < 280  # C.3.1: 240
    real = dataset.actions >= 0
    assert set(np.unique(dataset.actions[real])) == {0, 1, 2}
    np.testing.assert_array_equal(dataset.rewards, -1.0)
    assert np.all(dataset.observations[:, 2] == 0)
    # Real transitions follow the dynamics and never start inside the goal set (episodes end there).
    np.testing.assert_array_equal(
        mc.transition_table()[dataset.state_indices[real], dataset.actions[real]],
        dataset.next_state_indices[real])
    assert not np.asarray(mc.is_top_of_hill(dataset.observations[real, :2])).any()
    # Goal-entry rows: (s in G) -> [0.5, 0, 1], one per visited goal-set state.
    goal_rows = ~real
    assert np.asarray(mc.is_top_of_hill(dataset.observations[goal_rows, :2])).all()
    np.testing.assert_array_equal(dataset.next_observations[goal_rows],
                                  np.broadcast_to(mc.GENERAL_GOAL, (goal_rows.sum(), 3)))
    ends_in_goal = np.asarray(mc.is_top_of_hill(dataset.next_observations[real, :2])).sum()
    assert dataset.num_goal_entries >= ends_in_goal
    with pytest.raises(ValueError, match="num_episodes"):
        mc.generate_dataset(0, num_episodes=0)


def test_cost_to_go_satisfies_bellman_equation(table):
    target = np.zeros(mc.NUM_STATES, bool)
    target[80 * 160 + 80] = True
    for tgt in (target, mc.goal_mask(), mc.neighbourhood_mask(30 * 160 + 50)):
        cost = mc.cost_to_go(tgt, table)
        assert np.all(cost[tgt] == 0)
        best_next = cost[table].min(axis=1)
        np.testing.assert_array_equal(cost[~tgt], 1 + best_next[~tgt])  # inf stays inf


def test_cost_to_go_against_brute_force_on_random_graph():
    rng = np.random.default_rng(0)
    table = rng.integers(0, mc.NUM_STATES, (mc.NUM_STATES, 3))
    table[rng.random(table.shape) < 0.3] = -1  # missing transitions
    target = np.zeros(mc.NUM_STATES, bool)
    target[rng.integers(0, mc.NUM_STATES, 5)] = True
    # Value iteration from scratch as the reference.
    ref = np.where(target, 0.0, np.inf)
    for _ in range(200):
        nxt = np.where(table >= 0, ref[np.maximum(table, 0)], np.inf).min(axis=1)
        ref = np.where(target, 0.0, np.minimum(ref, 1 + nxt))
    np.testing.assert_array_equal(mc.cost_to_go(target, table), ref)


def test_dataset_oracle_is_never_better_than_full_dynamics(table, dataset):
    full = mc.cost_to_go(mc.goal_mask(), table)
    data = mc.cost_to_go(mc.goal_mask(), mc.dataset_table(dataset))
    assert np.all(data >= full)
    assert np.isfinite(full).all() and np.isinf(data).any()


def test_cost_to_go_rejects_bad_input(table):
    with pytest.raises(ValueError, match="target"):
        mc.cost_to_go(np.zeros(10, bool), table)
    with pytest.raises(ValueError, match="at least one"):
        mc.cost_to_go(np.zeros(mc.NUM_STATES, bool), table)
    with pytest.raises(ValueError, match="table"):
        mc.cost_to_go(mc.goal_mask(), table[:10])
    with pytest.raises(ValueError, match="center_index"):
        mc.neighbourhood_mask(-1)


def test_optimal_policy_scores_100_and_random_policy_less(table):
    target = mc.goal_mask()
    cost = mc.cost_to_go(target, table)
    policy = np.argmin(cost[table], axis=1)
    returns = np.asarray(mc.greedy_returns(jnp.asarray(policy), jnp.asarray(target), jnp.asarray(table)))
    optimal = -np.minimum(cost, 200)
    np.testing.assert_array_equal(returns, optimal)
    assert mc.normalized_score(returns, optimal) == pytest.approx(100.0)
    always_left = np.zeros(mc.NUM_STATES, np.int32)
    left = np.asarray(mc.greedy_returns(jnp.asarray(always_left), jnp.asarray(target), jnp.asarray(table)))
    assert mc.normalized_score(left, optimal) < 50
    # Hand check of the formula: returns half-way between -200 and optimal score 50.
    assert mc.normalized_score(np.array([-150.0]), np.array([-100.0])) == pytest.approx(50.0)
