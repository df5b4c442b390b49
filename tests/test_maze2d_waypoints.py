"""The graph waypoints' diagnosis on maze2d (benchmarks/maze2d_waypoints.py): its episode measures by hand, the
graph's edges against its own distances and the maze's walls, and its episodes in the JAX point maze."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents import qrl_policies as P
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent
from platonic_rl.benchmarks import maze2d_waypoints as W
from platonic_rl.benchmarks.presets import maze2d_qrl_config
from platonic_rl.envs import maze2d
from platonic_rl.envs.jax_env import Normalized
from platonic_rl.envs.point_maze import PointMaze

LAYOUT = maze2d.get_layout("umaze")


def test_episode_measures_by_hand():
    """Episode 0 arrives at its 3rd step and stays; episode 1 arrives at its 2nd and leaves after two steps."""
    goal = LAYOUT.goal
    far = goal + np.array([1.0, 0.0])
    e0 = [far, far, far, goal, goal, goal]
    e1 = [far, far, goal, goal, far, far]
    out = dict(positions=np.array([e0, e1]), targets=np.zeros((2, 5, 4)))
    norm_goal = np.asarray(maze2d.normaliser(LAYOUT)(maze2d.goal_states(goal)))
    r = W.episode_report(out, LAYOUT, norm_goal)
    assert r["arrived"] == 1.0 and r["at_goal_at_end"] == 0.5
    assert r["steps_to_arrive_median"] == 1.5          # first steps within the radius: 2 and 1 (0-based)
    assert r["stayed_after_arrival"] == (1.0 + 0.5) / 2  # 3 of 3 steps after arriving, 2 of 4
    assert r["score"] == float(maze2d.normalized_score(LAYOUT, np.array([3, 2])).mean())
    assert abs(r["final_distance_median"] - 0.5) < 1e-6   # 0 and 1 (the goal normalised and back in float32)


def test_the_graph_report_reads_the_policys_graph_and_the_mazes_walls():
    agent = QRLContinuousAgent.create(maze2d_qrl_config((16,), 8, (16,), 2, 4, (16,), 1e-4), 0)
    rng = np.random.default_rng(0)
    free = LAYOUT.free_cells[rng.integers(len(LAYOUT.free_cells), size=40)] + rng.uniform(-0.2, 0.2, (40, 2))
    states = np.asarray(maze2d.normaliser(LAYOUT)(np.concatenate([free, rng.uniform(-1, 1, (40, 2))], 1)))
    data = dict(observations=states, segment_end=np.arange(40) % 10 == 9)
    policy = P.make_policy("graph_waypoints", agent, states, reach=0.05, num_waypoints=40)
    goal = np.asarray(maze2d.normaliser(LAYOUT)(maze2d.goal_states(LAYOUT.goal)))
    g = W.graph_report(policy, LAYOUT, data, goal)
    d = np.asarray(P.waypoint_distances(agent, policy.waypoint_projections))
    edges = (d <= 0.05) & ~np.eye(40, dtype=bool)
    assert g["edges"] == edges.sum() > 0 and g["out_degree_mean"] == edges.sum(1).mean()
    np.testing.assert_array_equal(g["_edges"], edges)
    # an edge's ends that see each other are not "through a wall"; umaze's middle wall row separates rows 1 and 3
    pos = g["_positions"]
    crosses = (np.minimum(pos[:, None, 0], pos[None, :, 0]) < 1.5) & (np.maximum(pos[:, None, 0], pos[None, :, 0])
                                                                      > 2.5) & (np.maximum(pos[:, None, 1],
                                                                                           pos[None, :, 1]) < 2.4)
    assert g["_blocked"][crosses].all()


def test_episodes_in_the_jax_maze_follow_the_policy_and_record_its_targets():
    agent = QRLContinuousAgent.create(maze2d_qrl_config((16,), 8, (16,), 2, 4, (16,), 1e-4), 0)
    env = Normalized(PointMaze("umaze", goals="single"), tuple(LAYOUT.obs_center), tuple(LAYOUT.obs_scale))
    starts = jax.vmap(lambda k: env.env.init(k)[0])(jax.random.split(jax.random.PRNGKey(0), 3))
    goals = jnp.broadcast_to(jnp.asarray(maze2d.normaliser(LAYOUT)(maze2d.goal_states(LAYOUT.goal))), (3, 4))
    states = jax.random.uniform(jax.random.PRNGKey(1), (30, 4), minval=-1, maxval=1)
    policy = P.make_policy("graph_waypoints", agent, states, reach=0.5, num_waypoints=30, goal_dims=(0, 1))
    out = W.episodes(policy, env, starts, goals, 4)
    assert out["positions"].shape == (3, 5, 2) and out["targets"].shape == (3, 4, 4)
    np.testing.assert_array_equal(out["positions"][:, 0], starts["position"])
    np.testing.assert_array_equal(np.asarray(out["targets"])[..., 2:], np.asarray(goals)[:, None, 2:].repeat(4, 1))
    # the first step is the policy's own from the start
    first, _ = policy.step(policy.initial_policy_state(3), env.normalize(jax.vmap(env.env.observe)(starts)), goals)
    moved = jax.vmap(env.env.dynamics)(starts, jnp.clip(first, -1, 1))["position"]
    np.testing.assert_allclose(out["positions"][:, 1], moved, rtol=1e-6, atol=1e-6)


def test_the_targets_report_reads_the_policys_choice_and_the_wall_between():
    """With a reach beyond every distance the target is the goal itself (cost 0, at rest); the goal seen from row 3
    lies behind umaze's middle wall, from its own row it does not; d(s, g) is the agent's own."""
    agent = QRLContinuousAgent.create(maze2d_qrl_config((16,), 8, (16,), 2, 4, (16,), 1e-4), 0)
    states = jax.random.uniform(jax.random.PRNGKey(2), (20, 4), minval=-1, maxval=1)
    policy = P.make_policy("graph_waypoints", agent, states, reach=1e9, num_waypoints=20)
    goal = np.asarray(maze2d.normaliser(LAYOUT)(maze2d.goal_states(LAYOUT.goal)), np.float32)
    positions = np.array([[3.0, 1.0], [1.0, 2.0]])
    report = W.targets_report(policy, LAYOUT, positions, goal)
    assert [t["behind_wall"] for t in report] == [True, False]
    norm = maze2d.normaliser(LAYOUT)
    d = np.asarray(agent.goal_distances(norm(maze2d.goal_states(positions)), np.broadcast_to(goal, (2, 4)))).max(0)
    for t, d_sg in zip(report, d):
        assert not t["waypoint"] and t["target_goal_cost"] == 0.0
        np.testing.assert_allclose(t["target_position"], LAYOUT.goal, atol=1e-5)
        np.testing.assert_allclose(t["target_velocity"], 0.0, atol=1e-5)
        np.testing.assert_allclose(t["goal_distance"], d_sg, rtol=1e-5)
        assert t["target_distance"] == t["goal_distance"]
    # a reach below every distance to the goal and some waypoint within it: a waypoint is chosen, within reach
    s = np.asarray(norm(maze2d.goal_states(positions)), np.float32)
    d_sw = np.asarray(agent.goal_distances(jnp.repeat(s, 20, 0), jnp.tile(states, (2, 1)))).max(0)
    nearest = d_sw.reshape(2, 20).min(1)
    n = int(np.argmax(nearest < d))   # a position whose nearest waypoint is nearer than its goal
    assert nearest[n] < d[n]
    reach = float(nearest[n] + d[n]) / 2
    near = P.make_policy("graph_waypoints", agent, states, reach=reach, num_waypoints=20)
    chosen = [t for t in W.targets_report(near, LAYOUT, positions, goal) if t["waypoint"]]
    assert chosen and all(t["target_distance"] <= reach for t in chosen)
    with pytest.raises(ValueError, match="--targets-at takes x y pairs"):
        W.Args(targets_at=(1.0, 2.0, 3.0))
