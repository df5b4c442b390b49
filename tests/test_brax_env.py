"""Brax envs as goal envs and the suite's goal envs as Brax envs: stepping inside the compiled loops equals stepping
directly, goals and success as specified, bad specifications refused, the reverse wrapper steps as the suite's env."""
import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("brax")
from brax.envs.base import Env, State  # noqa: E402

from platonic_rl.agents import GCBCConfig  # noqa: E402
from platonic_rl.envs import jax_env  # noqa: E402
from platonic_rl.envs.brax_env import AsBraxEnv, BraxGoalEnv  # noqa: E402
from platonic_rl.envs.point_maze import PointMaze  # noqa: E402
from platonic_rl.envs.reacher import Reacher  # noqa: E402
from platonic_rl.training.device_loop import DeviceLoopConfig, make_train  # noqa: E402


class Glider(Env):
    """A tiny Brax env (no physics engine, so it compiles in a moment): a point in the plane with velocity,
    ``obs = [x, y, vx, vy, 9]`` (the last entry shows a constant, to test goal entries that are not the first);
    a target drawn at reset kept in ``info``; ``metrics["near"]`` = 1 within 0.3 of the target."""

    def reset(self, rng):
        start_key, target_key = jax.random.split(rng)
        obs = jnp.concatenate([jax.random.uniform(start_key, (2,), minval=-1, maxval=1), jnp.zeros(2), jnp.full(1, 9.)])
        target = jax.random.uniform(target_key, (2,), minval=-1, maxval=1)
        return State(pipeline_state=None, obs=obs, reward=jnp.zeros(()), done=jnp.zeros(()),
                     metrics={"near": jnp.zeros(())}, info={"target": target, "hit": jnp.zeros(())})

    def step(self, state, action):
        velocity = 0.8 * state.obs[2:4] + 0.1 * action
        position = state.obs[:2] + velocity
        near = (jnp.linalg.norm(position - state.info["target"]) < 0.3).astype(jnp.float32)
        obs = jnp.concatenate([position, velocity, state.obs[4:]])
        return state.replace(obs=obs, reward=near, metrics={"near": near, **({"late": near} if self.late else {})},
                             info={"target": state.info["target"], "hit": near})

    late = False  # True: a metrics entry ("late") that only a step adds, never the reset

    observation_size = property(lambda self: 5)
    action_size = property(lambda self: 2)
    backend = property(lambda self: "jax")


GLIDER = Glider()
LATE_GLIDER = Glider()
LATE_GLIDER.late = True


def target_goal(key, state):
    return state.info["target"]


def resting_at(state, goal):
    return jnp.concatenate([goal, jnp.zeros(2), jnp.full(1, 9.)])


def glider_env(**overrides):
    spec = dict(env=GLIDER, goal_dims=(0, 1), sample_goal=target_goal, goal_state=resting_at, success_threshold=0.3,
                episode_length=20)
    return BraxGoalEnv(**{**spec, **overrides})


def steer(observations, goals, key):
    return jnp.clip(3.0 * (goals[..., :2] - observations[..., :2]) - 2.0 * observations[..., 2:4], -1, 1)


def test_rollout_in_the_compiled_scan_equals_stepping_the_brax_env_directly():
    env = glider_env()
    out = jax.jit(lambda k: jax_env.rollout(env, steer, k, 3))(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.split(jax.random.PRNGKey(0))[0], 3)  # rollout's reset keys
    for i, key in enumerate(keys):
        env_key, goal_key = jax.random.split(key)  # BraxGoalEnv.reset's split
        state = GLIDER.reset(env_key)
        goal = resting_at(state, state.info["target"])
        np.testing.assert_array_equal(out["goals"][i], goal)
        observations, hit = [state.obs], bool(np.linalg.norm(state.obs[:2] - goal[:2]) <= 0.3)
        for _ in range(env.episode_length):
            state = GLIDER.step(state, steer(state.obs, goal, None))
            observations.append(state.obs)
            hit |= bool(np.linalg.norm(state.obs[:2] - goal[:2]) <= 0.3)
        np.testing.assert_allclose(out["observations"][i], np.stack(observations), rtol=1e-6, atol=1e-6)
        assert bool(out["success"][i]) == hit
    assert out["success"].any()  # the steering does reach some targets: success is not trivially False


@pytest.mark.slow  # ~15 s; the fast tests cover it in parts: the adapter in a compiled scan (above) and the loop's
# vmapped seeds (tests/test_device_loop.py)
def test_a_brax_env_trains_in_the_device_loop_vmapped_over_seeds():
    env = glider_env()
    config = DeviceLoopConfig(num_envs=4, unroll=10, updates_per_iteration=2, iterations=4, prefill_episodes=4,
                              batch_size=16, eval_every=2, eval_episodes=4)
    train = make_train(GCBCConfig(obs_dim=5, action_dim=2, hidden=(8,)), env, config)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    agents, metrics = jax.jit(jax.vmap(train))(keys)  # two seeds, one program
    np.testing.assert_array_equal(metrics["env_steps"], [[120, 160, 200, 240]] * 2)  # 80 prefill + 40 per iteration
    assert np.isfinite(metrics["bc_nll"]).all() and not np.allclose(metrics["bc_nll"][0], metrics["bc_nll"][1])
    evaluated = metrics["eval_success"][:, [1, 3]]  # every eval_every=2 iterations
    # Seeded values (CPU, the pinned jax): what each seed's 4 evaluation episodes reached.
    np.testing.assert_array_equal(evaluated, [[0.25, 0.0], [0.0, 0.0]])
    # Each vmapped seed is the run that seed makes alone (float32 sums in another order: a few ulps).
    alone_agent, alone = jax.jit(train)(keys[1])
    for name in ("bc_nll", "eval_success", "env_steps"):
        np.testing.assert_allclose(metrics[name][1], alone[name], rtol=1e-4, atol=1e-5, err_msg=name)
    for vmapped, lone in zip(jax.tree.leaves(jax.tree.map(lambda x: x[1], agents)), jax.tree.leaves(alone_agent)):
        np.testing.assert_allclose(vmapped, lone, rtol=1e-4, atol=1e-5)


def at(state, position, goal):
    """``state`` with the glider at rest at ``position`` and the goal values ``goal``."""
    obs = jnp.concatenate([position, jnp.zeros(2), jnp.full(1, 9.)])
    return state.replace(physics=dict(brax=state.physics["brax"].replace(obs=obs), goal=goal))


def test_success_from_a_threshold_on_chosen_entries_or_from_a_metrics_or_info_key():
    key = jax.random.PRNGKey(3)
    by_distance = glider_env()
    state = by_distance.reset(key)
    target = state.physics["goal"]
    near, far = target + jnp.array([0.29, 0.0]), target + jnp.array([0.31, 0.0])
    # Success is decided on the stepped state; at rest with zero action the glider stays where it is.
    assert bool(by_distance.step(at(state, near, target), jnp.zeros(2)).success)
    assert not bool(by_distance.step(at(state, far, target), jnp.zeros(2)).success)
    # success_dims: the goal fixes (x, y, vx); success measures (x, y) only, so vx = 0 against a goal of 5 is fine
    wide = glider_env(goal_dims=(0, 1, 2), sample_goal=lambda k, s: jnp.append(s.info["target"], 5.0),
                      goal_state=lambda s, g: jnp.concatenate([g, jnp.zeros(1), jnp.full(1, 9.)]), success_dims=(0, 1))
    assert bool(wide.step(at(wide.reset(key), near, jnp.append(target, 5.0)), jnp.zeros(2)).success)
    assert not bool(glider_env(goal_dims=(0, 1, 2), sample_goal=lambda k, s: jnp.append(s.info["target"], 5.0),
                               goal_state=lambda s, g: jnp.concatenate([g, jnp.zeros(1), jnp.full(1, 9.)]))
                    .step(at(wide.reset(key), near, jnp.append(target, 5.0)), jnp.zeros(2)).success)
    for name in ("near", "hit"):  # an entry of State.metrics, one of State.info
        keyed = glider_env(success_threshold=None, success_key=name)
        start = keyed.reset(key)
        reached = keyed.step(at(start, near, target), jnp.zeros(2))
        assert bool(reached.success) and float(reached.reward) == 1.0
        assert not bool(keyed.step(at(start, far, target), jnp.zeros(2)).success)


def test_goal_state_entries_alone_warn_and_leave_zeros_elsewhere():
    with pytest.warns(UserWarning, match="reachable goal states"):
        env = glider_env(goal_state=None, goal_dims=(0, 4), sample_goal=lambda k, s: jnp.array([0.5, 7.0]))
    state = env.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(state.goal, [0.5, 0.0, 0.0, 0.0, 7.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        glider_env()  # a goal_state given: no warning
    assert (env.obs_dim, env.action_dim, env.goal_dims) == (5, 2, (0, 4))
    np.testing.assert_array_equal(env.goal_mask, [1, 0, 0, 0, 1])


@pytest.mark.parametrize("overrides,message", [
    (dict(success_threshold=None), "exactly one of success_threshold"),
    (dict(success_key="near"), "exactly one of success_threshold"),
    (dict(success_threshold=0.0), "success_threshold must be > 0"),
    (dict(goal_dims=()), "goal_dims must be distinct indices"),
    (dict(goal_dims=(0, 5)), "goal_dims must be distinct indices into the 5-dim"),
    (dict(goal_dims=(1, 1)), "goal_dims must be distinct"),
    (dict(sample_goal=lambda k, s: jnp.zeros(3)), r"sample_goal must return .* shape \(2,\)"),
    (dict(goal_state=lambda s, g: g), r"goal_state must return a goal state of shape \(5,\)"),
    (dict(success_threshold=None, success_key="lost"), r"success_key 'lost' is in neither.*\['hit', 'near', 'target'\]"),
    (dict(success_dims=(2,)), "success_dims .* must be distinct entries of goal_dims"),
    (dict(episode_length=0), "episode_length must be a positive int"),
    (dict(env=LATE_GLIDER, success_threshold=None, success_key="late"), "success_key 'late' is in neither.*after reset"),
    (dict(env=PointMaze("umaze")), "env must be a brax.envs.Env"),
    (dict(observe_state=lambda s: jnp.zeros((2, 2))), "observation must be a vector"),
])
def test_bad_goal_specifications_are_refused(overrides, message):
    with pytest.raises((ValueError, TypeError), match=message):
        glider_env(**overrides)


@pytest.mark.parametrize("env", [PointMaze("umaze"), Reacher()], ids=["point_maze", "reacher"])
def test_the_suites_envs_as_brax_envs_step_as_themselves(env):
    brax_env = AsBraxEnv(env)
    assert (brax_env.observation_size, brax_env.action_size) == (2 * env.obs_dim, env.action_dim)
    key = jax.random.PRNGKey(1)
    ours, theirs = env.reset(key), jax.jit(brax_env.reset)(key)
    step = jax.jit(brax_env.step)
    actions = jax.random.uniform(jax.random.PRNGKey(2), (30, env.action_dim), minval=-1, maxval=1)
    for action in actions:
        ours, theirs = env.step(ours, action), step(theirs, action)
        np.testing.assert_allclose(theirs.obs, jnp.concatenate([ours.observation, ours.goal]), rtol=1e-6, atol=1e-6)
        assert float(theirs.reward) == float(ours.reward) and float(theirs.metrics["success"]) == float(ours.success)
        assert float(theirs.done) == 0.0  # the time limit is Brax's wrappers' to add


def test_brax_training_wrappers_end_the_suites_episodes_as_truncations():
    from brax.envs.wrappers.training import wrap
    env = PointMaze("umaze")
    wrapped = wrap(AsBraxEnv(env), episode_length=env.episode_length)
    state = jax.jit(wrapped.reset)(jax.random.split(jax.random.PRNGKey(0), 3))
    step = jax.jit(wrapped.step)
    for _ in range(env.episode_length):
        state = step(state, jnp.zeros((3, 2)))
    np.testing.assert_array_equal(state.done, 1.0)
    np.testing.assert_array_equal(state.info["truncation"], 1.0)  # a time limit: bootstrapped, not terminal


def test_bad_reverse_input():
    with pytest.raises(TypeError, match="AsBraxEnv: env must be a platonic_rl GoalEnv"):
        AsBraxEnv(GLIDER)
    env = glider_env()
    with pytest.raises(ValueError, match=r"action must have shape \(2,\)"):
        env.step(env.reset(jax.random.PRNGKey(0)), jnp.zeros(3))
    assert dataclasses.is_dataclass(env)


@pytest.mark.slow  # Brax's physics compiles in about 15 s; the adapter itself is tested above on a tiny Brax env
def test_brax_reacher_as_a_goal_env_matches_brax_and_shows_reachable_poses():
    """Brax's reacher through :func:`reacher`: the fingertip observed equals Brax's own (its target plus its
    tip-to-target vector); the pose goal is the arm at rest with its fingertip on the target; success is the
    fingertip within 0.05 of it; a rollout runs in the compiled scan."""
    from platonic_rl.envs import brax_env
    from platonic_rl.envs.reacher import fingertip
    env = brax_env.reacher(backend="spring")
    assert (env.obs_dim, env.action_dim, env.goal_dims, env.success_dims) == (8, 2, (0, 1, 2, 3, 6, 7), (6, 7))
    states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), 64))
    brax_obs = states.physics["brax"].obs
    np.testing.assert_allclose(states.observation[:, 6:], brax_obs[:, 4:6] + brax_obs[:, 8:10], atol=1e-5)
    target = states.physics["brax"].pipeline_state.q[:, 2:4]
    pose_q = jnp.arctan2(states.goal[:, [1, 3]], states.goal[:, [0, 2]])
    reachable = np.linalg.norm(target, axis=1) > 0.018
    np.testing.assert_allclose(fingertip(pose_q)[reachable], target[reachable], atol=1e-5)  # on the target
    np.testing.assert_allclose(states.goal[:, 6:], fingertip(pose_q), atol=1e-5)  # a consistent, resting pose
    np.testing.assert_array_equal(states.goal[:, 4:6], 0.0)
    gap = np.linalg.norm(states.observation[:, 6:] - states.goal[:, 6:], axis=1)
    np.testing.assert_array_equal(states.success, gap <= 0.05)
    out = jax.jit(lambda k: jax_env.rollout(env, jax_env.random_policy(2), k, 4))(jax.random.PRNGKey(1))
    assert out["observations"].shape == (4, 51, 8) and np.isfinite(out["observations"]).all()
    with pytest.warns(UserWarning, match="reachable goal states"):
        fingertip_goals = brax_env.reacher(backend="spring", goal="fingertip")
    assert fingertip_goals.goal_dims == (6, 7)
    with pytest.raises(ValueError, match="goal must be one of"):
        brax_env.reacher(goal="elbow")


@pytest.mark.slow  # two Brax SAC compilations (about a minute); the wrapper's stepping is tested above
@pytest.mark.parametrize("env", [PointMaze("umaze"), Reacher()], ids=["point_maze", "reacher"])
def test_brax_sac_runs_on_the_suites_envs(env, monkeypatch):
    """Brax's own SAC runs end to end on the suite's envs through AsBraxEnv (a short call: it finishes and reports
    finite evaluation metrics, including the success the wrapper exposes). Brax 0.14.2's training code calls
    ``jax.device_put_replicated``, which JAX 0.10 removed: the test supplies it (docs/environments.md)."""
    from brax.training.agents.sac import train as sac
    from platonic_rl.envs.brax_env import device_put_replicated
    monkeypatch.setattr(jax, "device_put_replicated", device_put_replicated, raising=False)
    reports = []
    _, params, metrics = sac.train(environment=AsBraxEnv(env), num_timesteps=2_000, episode_length=env.episode_length,
                                   num_envs=4, num_eval_envs=4, batch_size=32, min_replay_size=200, num_evals=2,
                                   progress_fn=lambda step, m: reports.append((step, m)), seed=0)
    assert reports and params is not None
    assert np.isfinite(float(metrics["eval/episode_reward"]))
    # The wrapper's reward is its success indicator, so Brax sums the same steps under both names (point maze: 5.75
    # steps at the goal per episode, seeded; the reacher: none), over whole episodes.
    assert float(metrics["eval/episode_success"]) == float(metrics["eval/episode_reward"])
    assert float(metrics["eval/avg_episode_length"]) == env.episode_length
    assert float(metrics["eval/episode_success"]) == {"PointMaze": 5.75, "Reacher": 0.0}[type(env).__name__]


def test_settings_name_the_env_the_same_way_in_every_process():
    """Run records compare an env's settings with the saved ones: functions by qualified name, the Brax env by
    class, so two instances built alike describe themselves alike (no memory addresses)."""
    import json

    from platonic_rl.training.device_loop import env_settings
    first, second = env_settings(glider_env()), env_settings(glider_env())
    assert first == second and json.loads(json.dumps(first)) == first
    assert first["env"] == "Glider" and first["sample_goal"].endswith("target_goal")
    assert first["goal_dims"] == [0, 1] and first["success_threshold"] == 0.3
    assert env_settings(glider_env(success_threshold=0.2)) != first
