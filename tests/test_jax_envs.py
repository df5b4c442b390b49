"""Functional JAX goal envs: the point maze against C MuJoCo (exact away from walls, measured at walls, MJX within
tolerance), the reacher's physics, MountainCar as a goal env, the batched rollout and the gymnasium view."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.envs import jax_env, maze2d, mountaincar
from platonic_rl.envs.goal_env import GoalEnvAdapter
from platonic_rl.envs.point_maze import PointMaze
from platonic_rl.envs.reacher import GOAL_RADIUS, Reacher, fingertip, joint_accelerations


def reference_trajectories(layout, n, steps, seed):
    """C MuJoCo (maze2d.Maze2D) states [n, steps + 1, 4] under smooth random actions that often push into walls."""
    rng = np.random.default_rng(seed)
    env = maze2d.Maze2D(layout, n)
    states = [env.reset(seed=seed, mode="multi")]
    actions = np.clip(np.cumsum(rng.normal(0, 0.3, (steps, n, 2)), 0), -1, 1)
    for a in actions:
        states.append(env.step(a)[0])
    return np.stack(states, 1), np.swapaxes(actions, 0, 1)


def wall_gap(walls, positions):
    """Distance from each position [n, 2] (D4RL coordinates) to the nearest wall cell."""
    gaps = []
    for i, j in np.argwhere(walls):
        low = np.array([i, j]) - 0.7  # cell (i, j) spans [i - 0.7, i + 0.3] x [j - 0.7, j + 0.3]
        gaps.append(np.linalg.norm(positions - np.clip(positions, low, low + 1.0), axis=1))
    return np.min(gaps, 0)


def physics_of(env, observation):
    if env.backend == "jax":
        return dict(position=observation[:2], velocity=observation[2:])
    qstate = maze2d.from_d4rl(env.maze, observation, xp=jnp)
    return env.reset(jax.random.PRNGKey(0)).physics.replace(qpos=qstate[:2], qvel=qstate[2:])


def one_step(env, states, actions):
    step = jax.jit(jax.vmap(lambda o, a: env.observe(env.dynamics(physics_of(env, o), a))))
    return np.asarray(step(jnp.asarray(states, jnp.float32), jnp.asarray(actions, jnp.float32)))


@pytest.fixture(scope="module")
def medium_reference():
    return reference_trajectories("medium", 8, 200, seed=1)


def test_point_maze_matches_mujoco_away_from_walls_and_stays_out_of_walls(medium_reference):
    states, actions = medium_reference
    env = PointMaze("medium")
    before, after = states[:, :-1].reshape(-1, 4), states[:, 1:].reshape(-1, 4)
    ours = one_step(env, before, actions.reshape(-1, 2))
    # MuJoCo's Euler step with implicit damping, by hand: where it holds, no contact acted.
    free_velocity = (4.18879 * np.clip(before[:, 2:], -5, 5) + actions.reshape(-1, 2)) / (4.18879 + 0.01)
    free = np.abs(free_velocity - after[:, 2:]).max(1) < 1e-6
    far = wall_gap(env.maze.walls, before[:, :2]) > 0.1 + 0.06  # no wall within one step's reach (<= 0.053)
    assert 0.2 < free.mean() and far.sum() > 50 and free[far].all()
    np.testing.assert_allclose(ours[far], after[far], atol=2e-5)
    # At walls MuJoCo's contacts are soft (the ball sinks in and springs back), ours hard: positions after one
    # contact step differ little (measured: median 0.0014, 90% 0.0047; MJX's own differ by 0.0024), velocities
    # more (median 0.10).
    position_error = np.abs(ours[~free, :2] - after[~free, :2]).max(1)
    assert np.median(position_error) < 0.005 and np.percentile(position_error, 90) < 0.01
    # Never inside a wall: the ball's centre is at least its radius from every wall cell.
    rollout = jax.jit(lambda k: jax_env.rollout(env, jax_env.random_policy(2), k, 64))(jax.random.PRNGKey(0))
    positions = np.asarray(rollout["observations"])[..., :2].reshape(-1, 2)
    assert wall_gap(env.maze.walls, positions).min() >= 0.1 - 1e-5


@pytest.mark.slow  # ~11 s: the optional MJX backend; the default JAX point maze has fast tests against MuJoCo
def test_mjx_backend_follows_mujoco_within_tolerance(medium_reference):
    states, actions = medium_reference
    env = PointMaze("medium", backend="mjx")
    initial = jax.jit(jax.vmap(lambda o: env.reset(jax.random.PRNGKey(0)).replace(physics=physics_of(env, o))))(
        jnp.asarray(states[:, 0], jnp.float32))

    def body(state, a):
        state = jax.vmap(env.step)(state, a)
        return state, state.observation

    _, ours = jax.jit(lambda s, a: jax.lax.scan(body, s, a))(initial, jnp.swapaxes(jnp.asarray(actions), 0, 1))
    error = np.abs(np.swapaxes(np.asarray(ours), 0, 1)[..., :2] - states[:, 1:, :2])
    # float32 MJX vs float64 C MuJoCo: equal until the first contacts, then apart as bounces amplify differences
    # (measured here: 5e-7 over the first 20 steps, mean 0.03 over 200 steps of frequent wall contacts).
    assert error[:, :20].max() < 1e-4 and error.mean() < 0.1, (error[:, :20].max(), error.mean())


def test_mjx_model_first_built_inside_a_trace_does_not_leak_into_the_next():
    from platonic_rl.envs import point_maze

    point_maze._mjx_model.cache_clear()
    env = PointMaze("umaze", backend="mjx")
    first = jax.jit(env.reset)(jax.random.PRNGKey(0))  # the cached model is built inside this trace
    again = jax.jit(lambda k: env.reset(k).observation)(jax.random.PRNGKey(0))  # a new trace reuses it
    np.testing.assert_array_equal(np.asarray(again), np.asarray(first.observation))


def test_point_maze_resets_goals_and_rewards():
    keys = jax.random.split(jax.random.PRNGKey(0), 500)
    state = jax.jit(jax.vmap(PointMaze("medium").reset))(keys)
    layout = maze2d.get_layout("medium")
    start_cells, goal_cells = maze2d.cell_of(np.asarray(state.observation)), maze2d.cell_of(np.asarray(state.goal))
    assert not np.any(layout.walls[start_cells[:, 0], start_cells[:, 1]])
    assert not np.any(layout.walls[goal_cells[:, 0], goal_cells[:, 1]])
    assert np.all(np.any(start_cells != goal_cells, 1))  # multi: another cell than the start's
    assert len({tuple(c) for c in goal_cells}) == len(layout.free_cells)
    np.testing.assert_array_equal(np.asarray(state.goal)[:, 2:], 0.0)
    single = jax.jit(jax.vmap(PointMaze("medium", goals="single").reset))(keys[:5])
    np.testing.assert_allclose(np.asarray(single.goal)[:, :2], np.tile(layout.goal, (5, 1)))
    # Reward and success within 0.5 of the goal; done after the layout's limit.
    env = PointMaze("umaze")
    state, step = jax.jit(env.reset)(jax.random.PRNGKey(1)), jax.jit(env.step)
    at_goal = state.replace(physics=dict(position=state.goal[:2] + jnp.array([0.3, 0.3]), velocity=jnp.zeros(2)))
    stepped = step(at_goal, jnp.zeros(2))
    assert bool(stepped.success) and float(stepped.reward) == 1.0 and not bool(stepped.done)
    assert env.episode_length == 300 and PointMaze("large").episode_length == 800
    assert bool(step(stepped.replace(steps=jnp.int32(299)), jnp.zeros(2)).done)


def test_reacher_physics():
    np.testing.assert_allclose(fingertip(jnp.array([0.0, 0.0])), [0.21, 0.0], atol=1e-7)
    np.testing.assert_allclose(fingertip(jnp.array([np.pi / 2, -np.pi / 2])), [0.11, 0.1], atol=1e-7)
    # The equations of motion are Lagrange's: M(q) qdd + c = tau, checked against autodiff of the Lagrangian.
    import platonic_rl.envs.reacher as r

    def lagrangian(q, qd):
        v1 = jax.jvp(lambda q: r.LINK_LENGTHS[0] * jnp.stack([jnp.cos(q[0]), jnp.sin(q[0])]), (q,), (qd,))[1]
        v2 = jax.jvp(fingertip, (q,), (qd,))[1]
        return 0.5 * r.LINK_MASS * (v1 @ v1 + v2 @ v2) + 0.5 * r.ARMATURE * qd @ qd

    @jax.jit  # one program, not each autodiff operation compiled on its own
    def both_sides(q, qd, tau):
        mass = jax.hessian(lagrangian, argnums=1)(q, qd)
        # d/dt dL/dqd - dL/dq = tau - b qd  =>  M qdd = tau - b qd + dL/dq - (d/dq dL/dqd) qd
        rhs = tau - r.DAMPING * qd + jax.grad(lagrangian)(q, qd) - jax.jacobian(jax.grad(lagrangian, 1), 0)(q, qd) @ qd
        return joint_accelerations(q, qd, tau), jnp.linalg.solve(mass, rhs)

    np.testing.assert_allclose(*both_sides(jnp.array([0.3, -1.1]), jnp.array([2.0, -3.0]), jnp.array([0.05, -0.02])),
                               rtol=1e-4)
    # Reachable goals, the goal dims hold the fingertip, success within the radius.
    env = Reacher(goal="fingertip")
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    states = jax.jit(jax.vmap(env.reset))(keys)
    goals = np.asarray(states.goal)
    assert env.goal_dims == (6, 7)
    assert np.all(np.linalg.norm(goals[:, 6:], axis=1) <= 0.21 + 1e-6) and np.all(goals[:, :6] == 0)
    # The default pose goal: the same targets, shown as a configuration of the arm at rest whose fingertip they are.
    pose = Reacher()
    assert pose.goal_dims == (0, 1, 2, 3, 6, 7)
    pose_goals = np.asarray(jax.jit(jax.vmap(pose.reset))(keys).goal)
    np.testing.assert_array_equal(pose_goals[:, 6:], goals[:, 6:])
    np.testing.assert_allclose(pose_goals[:, 0:4:2] ** 2 + pose_goals[:, 1:4:2] ** 2, 1.0, atol=1e-5)  # cos^2 + sin^2
    assert np.all(pose_goals[:, 4:6] == 0)  # at rest
    angles = np.arctan2(pose_goals[:, 1:4:2], pose_goals[:, 0:4:2])
    np.testing.assert_allclose(np.asarray(fingertip(jnp.asarray(angles))), pose_goals[:, 6:], atol=1e-5)
    np.testing.assert_allclose(pose_goals * pose.goal_mask, pose_goals)  # already masked, as hindsight goals are
    with pytest.raises(ValueError, match="goal must be one of"):
        Reacher(goal="joints")
    np.testing.assert_allclose(np.asarray(states.observation)[:, 6:], np.asarray(fingertip(states.physics["q"])),
                               atol=1e-6)
    assert np.array_equal(np.asarray(states.success),
                          np.linalg.norm(np.asarray(states.observation)[:, 6:] - goals[:, 6:], axis=1) <= GOAL_RADIUS)


def test_mountaincar_goal_env_is_gymnasiums_dynamics():
    env = mountaincar.MountainCarGoal()
    state = env.reset(jax.random.PRNGKey(0))
    assert -0.6 <= float(state.observation[0]) <= -0.4 and float(state.observation[1]) == 0.0
    for action, push in ((-0.9, 0), (0.2, 1), (1.0, 2)):
        expected = mountaincar.step(state.physics, jnp.int32(push))
        np.testing.assert_array_equal(env.step(state, jnp.array([action])).observation, expected)
    top = state.replace(physics=jnp.array([0.49, 0.07]))
    assert bool(env.step(top, jnp.array([1.0])).success)


def test_rollout_is_batched_and_seeded():
    env = PointMaze("umaze", episode_length=30)
    run = jax.jit(lambda k: jax_env.rollout(env, jax_env.random_policy(2), k, 5))
    a, b, c = run(jax.random.PRNGKey(0)), run(jax.random.PRNGKey(0)), run(jax.random.PRNGKey(1))
    assert a["observations"].shape == (5, 31, 4) and a["actions"].shape == (5, 30, 2)
    np.testing.assert_array_equal(a["observations"], b["observations"])
    assert not np.allclose(a["observations"], c["observations"])
    # The rollout is the same as stepping by hand.
    state = jax_env.reset_batch(env, jax.random.split(jax.random.PRNGKey(0))[0], 5)
    step = jax.jit(lambda state, actions: jax_env.step_batch(env, state, actions))  # one program for the 30 steps
    for t in range(30):
        state = step(state, a["actions"][:, t])
        np.testing.assert_allclose(state.observation, a["observations"][:, t + 1], atol=1e-6)


def test_gymnasium_view_runs_in_the_host_adapter_with_autoreset():
    from platonic_rl.envs.jax_gymnasium import GymnasiumVectorEnv

    env = PointMaze("umaze", episode_length=10)
    vector = GymnasiumVectorEnv(env, num_envs=3)
    adapter = GoalEnvAdapter(vector)
    assert adapter.goal_dims == (0, 1) and adapter.episode_length == 10
    out = adapter.rollout(lambda o, g: np.ones((len(o), 2)), seed=0)
    assert out["observations"].shape == (3, 11, 4)
    np.testing.assert_array_equal(out["goals"][:, 2:], 0.0)
    obs, *_ = vector.reset(seed=0)
    for _ in range(10):
        obs, reward, terminated, truncated, info = vector.step(np.zeros((3, 2), np.float32))
    assert truncated.all() and not terminated.any()
    first, *_ = vector.step(np.zeros((3, 2), np.float32))  # next-step autoreset: new starts and goals
    assert not np.allclose(first["desired_goal"], obs["desired_goal"])
    with pytest.raises(ValueError, match=r"actions must have shape \(3, 2\)"):
        vector.step(np.zeros((3, 3)))


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="layout must be one of"):
        PointMaze("huge")
    with pytest.raises(ValueError, match="backend must be one of"):
        PointMaze("umaze", backend="brax")
    with pytest.raises(ValueError, match="goals must be 'multi' or 'single'"):
        PointMaze("umaze", goals="any")
    with pytest.raises(ValueError, match="episode_length"):
        Reacher(episode_length=0)
    env = PointMaze("umaze")
    with pytest.raises(ValueError, match=r"action must have shape \(2,\)"):
        env.step(env.reset(jax.random.PRNGKey(0)), jnp.zeros(3))
    from platonic_rl.envs.jax_gymnasium import GymnasiumVectorEnv

    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        GymnasiumVectorEnv(env, 0)


def test_envs_are_hashable_static_configs():
    assert hash(PointMaze("umaze")) == hash(PointMaze("umaze"))
    assert dataclasses.replace(PointMaze("umaze"), episode_length=50).episode_length == 50


def test_normalized_view_keeps_the_envs_success():
    layout = maze2d.get_layout("medium")
    env = jax_env.Normalized(PointMaze("medium"), tuple(layout.obs_center), tuple(layout.obs_scale))
    assert (env.obs_dim, env.action_dim, env.goal_dims, env.episode_length) == (4, 2, (0, 1), 600)
    state = env.reset(jax.random.PRNGKey(0))
    raw = state.physics
    np.testing.assert_allclose(state.observation, (raw.observation - layout.obs_center) / layout.obs_scale, rtol=1e-6)
    np.testing.assert_allclose(state.goal[:2], ((raw.goal - layout.obs_center) / layout.obs_scale)[:2], rtol=1e-6)
    np.testing.assert_array_equal(state.goal[2:], 0.0)  # masked to the goal dimensions, as relabelled goals are
    state = env.step(state, jnp.ones(2))
    assert bool(state.success) == bool(state.physics.success) and int(state.steps) == 1
    assert np.abs(np.asarray(state.observation)).max() <= 1.5
    with pytest.raises(ValueError, match="center must have obs_dim=4 entries"):
        jax_env.Normalized(PointMaze("medium"), (0.0,), (1.0, 1.0, 1.0, 1.0))


def test_rollout_acting_carries_the_policy_state_on_the_same_episodes():
    class Counter:
        """Acts with (steps taken so far) / 100, counting in its policy state."""

        def initial_policy_state(self, batch_size):
            return jnp.zeros((batch_size, 1))

        def step(self, policy_state, observations, goals, prev_actions=None, rng=None):
            return jnp.repeat(policy_state / 100, 2, axis=1), policy_state + 1

    env, key = PointMaze("umaze", episode_length=6), jax.random.PRNGKey(3)
    out = jax.jit(lambda k: jax_env.rollout_acting(env, Counter(), k, 4))(key)
    np.testing.assert_allclose(out["actions"], np.broadcast_to(np.arange(6)[None, :, None] / 100, (4, 6, 2)), atol=1e-7)
    plain = jax_env.rollout(env, lambda o, g, _: jnp.zeros((o.shape[0], 2)), key, 4)
    # The key alone draws the episodes (jitted against not: float32 rounding apart).
    np.testing.assert_allclose(out["goals"], plain["goals"], atol=1e-6)
    np.testing.assert_allclose(out["observations"][:, 0], plain["observations"][:, 0], atol=1e-6)
