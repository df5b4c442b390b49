"""QRL's critic and actor checks (agents.qrl_diagnostics): the action grid, the actor's gap to its critic's best
grid action and the critic's own greedy action, both against costs computed by hand one action at a time, and the
point maze's critic-quality check (benchmarks.qrl_slice, beside the env it steps) with a stand-in critic."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.agents.qrl_diagnostics import action_grid, actor_critic_gap, grid_argmin_actions
from platonic_rl.benchmarks.qrl_slice import true_dynamics_greedy_actions
from platonic_rl.envs.maze2d import normaliser
from platonic_rl.envs.point_maze import PointMaze


def test_action_grid_lists_every_grid_point_once():
    np.testing.assert_array_equal(action_grid(3, 2), [[a, b] for a in (-1, 0, 1) for b in (-1, 0, 1)])
    assert action_grid(5, 3).shape == (125, 3) and len(np.unique(np.asarray(action_grid(5, 3)), axis=0)) == 125
    with pytest.raises(ValueError, match="grid_size must be >= 2"):
        action_grid(1, 2)


def test_actor_critic_gap_is_the_actors_learned_cost_above_the_best_grid_action():
    config = QRLContinuousConfig(obs_dim=4, action_dim=2, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                                 iqe_components=4, iqe_dim_per_component=4, dynamics_hidden=(16,), actor_hidden=(16,))
    agent = QRLContinuousAgent.create(config, 1)
    rng = np.random.default_rng(2)
    # The fresh dynamics T is the identity (zero-initialised residual): perturb every critic weight so the
    # learned cost depends on the action.
    leaves, treedef = jax.tree.flatten(agent.critic_params)
    noisy = [x + 0.5 * jnp.asarray(rng.normal(size=x.shape), jnp.float32) for x in leaves]
    agent = agent.replace(critic_state=agent.critic_state.replace(params=jax.tree.unflatten(treedef, noisy)))
    obs, goals = (jnp.asarray(rng.normal(size=(5, 4)), jnp.float32) for _ in range(2))
    gap = np.asarray(actor_critic_gap(agent, obs, goals, grid_size=3))

    distances = jax.jit(agent.goal_distances_after)

    def cost(actions):  # by hand, one action at a time: max over critics of d(T(f(s), a), f(g))
        return np.asarray(distances(agent.critic_params, obs, jnp.asarray(actions, jnp.float32), goals)).max(0)
    grid = np.array([[a, b] for a in (-1, 0, 1) for b in (-1, 0, 1)], np.float32)
    chosen = cost(np.asarray(agent.act(obs, goals)))
    offered = np.stack([cost(np.broadcast_to(a, (5, 2))) for a in grid])
    np.testing.assert_allclose(gap, chosen - np.minimum(offered.min(0), chosen), rtol=1e-5, atol=1e-4)
    assert np.all(gap >= 0) and np.any(gap > 1e-3)  # a random actor leaves learned distance on the table
    np.testing.assert_array_equal(grid_argmin_actions(agent, obs, goals, grid_size=3), grid[offered.argmin(0)])
    # An actor whose mode is a grid point, (0, 0) with its output layer zeroed, is scored against the grid
    # alone: its gap is its cost above the grid's best, 0 exactly where (0, 0) is that best.
    zeroed = jax.tree.map(lambda x: x, agent.actor_params)
    last = max(k for k in zeroed["params"]["TanhNormalPolicy_0"])
    policy = zeroed["params"]["TanhNormalPolicy_0"]
    policy[last] = jax.tree.map(jnp.zeros_like, policy[last])
    still = agent.replace(actor_state=agent.actor_state.replace(params=zeroed))
    np.testing.assert_array_equal(np.asarray(still.act(obs, goals)), 0.0)
    gap0 = np.asarray(actor_critic_gap(still, obs, goals, grid_size=3))
    np.testing.assert_allclose(gap0, cost(np.zeros((5, 2))) - offered.min(0), rtol=1e-5, atol=1e-4)


def test_the_critic_check_steps_the_true_dynamics_towards_the_smallest_learned_distance():
    """The critic-quality check (the maze2d slice's and the maze2d benchmark's ``qrl_true`` row). With a stand-in
    critic whose distance is the Euclidean one between positions, the check's action from rest is the grid action
    straight at the goal (only it makes the most progress along the goal's axis), and it pushes back when the
    point already moves past the goal."""
    class Euclidean:
        def goal_distances(self, observations, goals):
            return jnp.linalg.norm(observations[:, :2] - goals[:, :2], axis=-1)[None]

    env = PointMaze("umaze")
    start = np.asarray(env.maze.free_cells[0], np.float32)
    observations = jnp.asarray([[*start, 0.0, 0.0], [*start, 0.0, 0.0], [*start, 3.0, 0.0]], jnp.float32)
    goals = jnp.asarray([[start[0] + 1, start[1], 0, 0], [start[0], start[1] - 1, 0, 0],
                         [start[0], start[1], 0, 0]], jnp.float32)
    actions = np.asarray(true_dynamics_greedy_actions(Euclidean(), env, observations, goals))
    np.testing.assert_array_equal(actions, [[1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]])
    with pytest.raises(ValueError, match="hold_steps must be >= 1"):
        true_dynamics_greedy_actions(Euclidean(), env, observations, goals, hold_steps=0)


@pytest.mark.slow  # ~11 s (four compiled rollouts); hold_steps=1, the default, is the critic check's fast test above
def test_the_held_check_reads_the_distance_after_holding_each_action():
    """With ``hold_steps`` k the check picks the grid action whose state after k true steps with it held has the
    smallest distance: checked against the states rolled out by hand, with a stand-in distance that weighs
    position and velocity (so the choice depends on k); k < 1 is refused."""
    class Weighted:
        def goal_distances(self, observations, goals):
            position = jnp.abs(observations[:, :2] - goals[:, :2]).sum(-1)
            return (position + 0.3 * jnp.abs(observations[:, 2:]).sum(-1))[None]

    env = PointMaze("medium")
    rng = np.random.default_rng(0)
    free = np.asarray(env.maze.free_cells, np.float32)
    observations = jnp.asarray(np.concatenate([free[rng.integers(len(free), size=6)] + rng.uniform(-0.2, 0.2, (6, 2)),
                                               rng.normal(0, 1.5, (6, 2))], 1), jnp.float32)
    goals = jnp.asarray(np.concatenate([free[rng.integers(len(free), size=6)], np.zeros((6, 2))], 1), jnp.float32)
    grid, norm = np.asarray(action_grid(5, 2)), normaliser(env.maze)

    def held(observation, action, k):  # by hand: hold the action k steps of the true dynamics
        physics = dict(position=observation[:2], velocity=observation[2:])
        for _ in range(k):
            physics = env.dynamics(physics, action)
        return env.observe(physics)

    chosen = {}
    for k in (1, 3):  # 3 held steps change 5 of the 6 choices (the held rollout's cost grows with k)
        actions = np.asarray(true_dynamics_greedy_actions(Weighted(), env, observations, goals, 5, hold_steps=k))
        ends = jax.jit(jax.vmap(jax.vmap(lambda o, a: held(o, a, k), (None, 0)), (0, None)))(observations, grid)
        for end, g, a in zip(np.asarray(ends), goals, actions):  # [G, 4] states after the hold, per observation
            costs = np.asarray(Weighted().goal_distances(norm(end), norm(jnp.broadcast_to(g, end.shape))))[0]
            np.testing.assert_array_equal(a, grid[int(np.argmin(costs))])
        chosen[k] = actions
    assert np.any(chosen[1] != chosen[3])  # the hold changes some choices: the check is not k-blind
    with pytest.raises(ValueError, match="hold_steps must be >= 1"):
        true_dynamics_greedy_actions(Weighted(), env, observations, goals, hold_steps=0)
