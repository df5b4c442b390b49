"""DeepMind Control in MJX: the same observations, rewards and one-step dynamics as dm_control on the same states,
and the noisy variants as pure functions (what no action moves, what the reward reads), vmapped and jitted.

Tolerances. Read from the same state, observations and rewards differ only by float32 rounding (MJX) against
float64 (MuJoCo): values up to about 40 through a few operations, so 1e-5 absolute. One control step from the same
state adds MJX's float32 constraint solve (contacts: cheetah's feet, walker's, none for reacher, whose contacts are
off): its velocities are allowed 1e-3 of the largest speed in the run (measured over 300 random-action steps: cheetah
4e-5 of 11, walker 7e-3 of 36 over its 10 physics steps, reacher 1e-6 of 5), positions 1e-4."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.envs import dmc_jax  # noqa: E402
from platonic_rl.envs.dmc import DMCEnv, TASKS, flat_observation  # noqa: E402
from platonic_rl.envs.dmc_jax import DMCJaxEnv, jax_task, task_model, tolerance  # noqa: E402


def host_trajectory(task: str, steps: int, seed: int = 1):
    """dm_control's states (qpos, qvel, reacher's target), random actions, and the observation and reward after each
    action."""
    from dm_control import suite

    spec = TASKS[task]
    host = suite.load(spec.domain, spec.name, task_kwargs=dict(random=np.random.RandomState(seed)))
    rng = np.random.default_rng(seed)
    host.reset()
    states, actions, observations, rewards = [], [], [], []
    for _ in range(steps):
        target = (np.asarray(host.physics.named.model.geom_pos["target", ["x", "y"]]) if task == "reacher-easy"
                  else np.zeros(2))
        states.append((host.physics.data.qpos.copy(), host.physics.data.qvel.copy(), target))
        actions.append(rng.uniform(-1, 1, host.action_spec().shape))
        time_step = host.step(actions[-1])
        observations.append(flat_observation(time_step))
        rewards.append(time_step.reward)
    return states, np.asarray(actions), np.asarray(observations), np.asarray(rewards)


@functools.partial(jax.jit, static_argnames="env")
def _read_and_step(env: DMCJaxEnv, qpos, qvel, target, action):
    """From a host state: its observation and reward, and those and the state after one control step."""
    from mujoco import mjx

    _, model, _ = task_model(env.task)
    spec = jax_task(env.task)
    data = mjx.make_data(model).replace(qpos=qpos.astype(jnp.float32), qvel=qvel.astype(jnp.float32))
    body = dict(data=mjx.forward(model, data), target=target.astype(jnp.float32))
    after = env._control_step(body, action.astype(jnp.float32))
    reward = lambda b: spec.reward_from_sensor(b["data"], spec.sensor(b["data"], b["target"]))  # noqa: E731
    return (env.task_observation(body), reward(body), env.task_observation(after), reward(after),
            after["data"].qpos, after["data"].qvel)


# walker: ~11 s, with -m slow; cheetah (the device benchmark's task) and reacher run by default.
@pytest.mark.parametrize("task", ["cheetah-run", pytest.param("walker-walk", marks=pytest.mark.slow), "reacher-easy"])
def test_mjx_reads_and_steps_as_dm_control_on_the_same_states(task):
    states, actions, observations, rewards = host_trajectory(task, 41)
    env = DMCJaxEnv(task, action_repeat=1)
    speed = max(np.abs(v).max() for _, v, _ in states)
    for t in range(1, 40):
        qpos, qvel, target = states[t]
        obs, reward, next_obs, next_reward, next_qpos, next_qvel = map(np.asarray, _read_and_step(
            env, jnp.asarray(qpos), jnp.asarray(qvel), jnp.asarray(target), jnp.asarray(actions[t])))
        np.testing.assert_allclose(obs, observations[t - 1], atol=1e-5)  # the observation the host saw there
        np.testing.assert_allclose(reward, rewards[t - 1], atol=1e-5)
        np.testing.assert_allclose(next_qpos, states[t + 1][0], atol=1e-4)
        np.testing.assert_allclose(next_qvel, states[t + 1][1], atol=1e-3 * speed)
        np.testing.assert_allclose(next_obs, observations[t], atol=1e-3 * speed)
        np.testing.assert_allclose(next_reward, rewards[t], atol=1e-3)


def test_tolerance_is_dm_controls():
    from dm_control.utils import rewards

    x = np.linspace(-3, 14, 171)
    for kwargs in [dict(bounds=(10, np.inf), margin=10, value_at_margin=0, sigmoid="linear"),
                   dict(bounds=(1.2, np.inf), margin=0.6), dict(bounds=(0, 0.06)),
                   dict(bounds=(1, np.inf), margin=0.5, value_at_margin=0.5, sigmoid="linear")]:
        expected = rewards.tolerance(x, **kwargs)
        (lower, upper), rest = kwargs["bounds"], {k: v for k, v in kwargs.items() if k != "bounds"}
        np.testing.assert_allclose(np.asarray(tolerance(jnp.asarray(x), lower, upper, **rest)), expected, atol=1e-6)


@pytest.mark.parametrize("task", ["cheetah-run", "walker-walk", "reacher-easy"])
def test_starts_are_dm_controls_distribution(task):
    """The drawn joints lie in dm_control's ranges (limited joints; walker's and reacher's free hinges in
    [-pi, pi); cheetah's root is not drawn), the others stay at the model's qpos0; reacher's target lies 0.05 to 0.2
    from the centre."""
    mj_model, _, _ = task_model(task)
    qpos, target = jax.vmap(jax_task(task).init)(jax.random.split(jax.random.PRNGKey(0), 256))
    qpos, target = np.asarray(qpos), np.asarray(target)
    for j in range(mj_model.njnt):
        adr, values = mj_model.jnt_qposadr[j], qpos[:, mj_model.jnt_qposadr[j]]
        if mj_model.jnt_limited[j]:
            low, high = mj_model.jnt_range[j]
        elif mj_model.jnt_type[j] == 3 and task != "cheetah-run":
            low, high = -np.pi, np.pi
        else:
            np.testing.assert_array_equal(values, mj_model.qpos0[adr])
            continue
        assert low - 1e-6 <= values.min() and values.max() <= high + 1e-6 and values.std() > 0.2 * (high - low) / 4
    radius = np.linalg.norm(target, axis=1)
    if task == "reacher-easy":
        assert 0.05 - 1e-6 <= radius.min() and radius.max() <= 0.2 + 1e-6
    else:
        np.testing.assert_array_equal(target, 0.0)


@functools.partial(jax.jit, static_argnames="env")
def rollout(env: DMCJaxEnv, key, actions):
    """One episode's first ``len(actions)`` steps: observations [T + 1, D], rewards [T], infos (stacked)."""
    state = env.reset(key)

    def body(state, action):
        state = env.step(state, action)
        return state, (state.observation, state.reward, state.info)

    _, (observations, rewards, infos) = jax.lax.scan(body, state, actions)
    infos = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), state.info, infos)
    return jnp.concatenate([state.observation[None], observations]), rewards, infos


@pytest.mark.parametrize("task", ["cheetah-run", "reacher-easy"])
def test_observation_sizes_are_the_host_envs(task):
    for variant in dmc_jax.VARIANTS:
        host = DMCEnv(task, variant, seed=0)
        assert DMCJaxEnv(task, variant).obs_dim == host.observation_space.shape[0], variant
        assert DMCJaxEnv(task, variant).action_dim == host.action_space.shape[0]


# ~19 s, compile-bound (two MJX envs): with -m slow; the noisy sensor's test below keeps an MJX distractor (its
# reward, what no action moves) in the default suite.
@pytest.mark.slow
def test_twin_is_uncontrollable_and_leaves_the_agent_and_its_reward_alone():
    noiseless, twin = DMCJaxEnv("reacher-easy"), DMCJaxEnv("reacher-easy", "distractors", num_twins=2)
    actions = jax.random.uniform(jax.random.PRNGKey(1), (30, 2), minval=-1, maxval=1)
    plain, with_twin = rollout(noiseless, jax.random.PRNGKey(5), actions), rollout(twin, jax.random.PRNGKey(5), actions)
    size = noiseless.obs_dim
    assert with_twin[0].shape == (31, 3 * size)
    # Equal to float32 rounding: the two envs are two compiled programs, whose fusions may round differently.
    np.testing.assert_allclose(plain[0], with_twin[0][:, :size], atol=1e-5)
    np.testing.assert_allclose(plain[1], with_twin[1], atol=1e-6)
    np.testing.assert_array_equal(with_twin[0][:, size:], with_twin[2]["distractor_state"])
    other = rollout(twin, jax.random.PRNGKey(5), -actions)
    np.testing.assert_array_equal(with_twin[2]["distractor_state"], other[2]["distractor_state"])
    assert not np.allclose(with_twin[2]["agent_state"][-1], other[2]["agent_state"][-1])
    last = np.asarray(with_twin[0][-1])
    assert not np.allclose(last[size:2 * size], last[2 * size:])  # two twins, two bodies
    assert not np.allclose(rollout(twin, jax.random.PRNGKey(6), actions)[0][-1, size:], last[size:])


@pytest.mark.parametrize("task", ["reacher-easy", pytest.param("walker-walk", marks=pytest.mark.slow)])  # walker: ~25 s
def test_noisy_sensor_rewards_the_perturbed_sensor_which_no_action_moves(task):
    """The reward is the task's reward of (sensor + scale x n), n the smooth signal (observed, scaled, before the
    perturbed sensor, which the observation ends with); ``task_reward`` is the noiseless env's reward; n ignores the
    action; walker's observed height is the perturbed sensor."""
    env, plain = DMCJaxEnv(task, "noisy_sensor", action_repeat=1), DMCJaxEnv(task, action_repeat=1)
    actions = jax.random.uniform(jax.random.PRNGKey(2), (40, env.action_dim), minval=-1, maxval=1)
    observations, rewards, infos = rollout(env, jax.random.PRNGKey(3), actions)
    # Two compiled programs round differently; walker's contacts carry that over 40 steps to about 1e-5.
    np.testing.assert_allclose(infos["task_reward"][1:], rollout(plain, jax.random.PRNGKey(3), actions)[1], atol=1e-4)
    spec = jax_task(task)
    n = np.asarray(infos["distractor_state"][:, -1])
    np.testing.assert_allclose(observations[:, -2], env.distractor_scale * n, rtol=1e-6)
    assert np.abs(n).max() < 0.5 and np.abs(n).max() > 0.01 and np.abs(np.diff(n)).max() < 0.05
    shaped = jax.vmap(lambda s: spec.reward_from_sensor(None, s))(observations[1:, -1]) if task == "reacher-easy" \
        else None
    if shaped is not None:
        np.testing.assert_allclose(rewards, shaped, atol=1e-6)
        assert not np.allclose(rewards, infos["task_reward"][1:]) or np.all(rewards == 0)
    else:
        np.testing.assert_allclose(observations[:, 14], observations[:, -1], rtol=1e-6)  # the observed height
        assert np.abs(observations[:, 14] - rollout(plain, jax.random.PRNGKey(3), actions)[0][:, 14]).max() > 1e-3
    other = rollout(env, jax.random.PRNGKey(3), -actions)[2]["distractor_state"][:, -1]
    np.testing.assert_array_equal(n, other)


@pytest.mark.slow  # ~13 s, compile-bound; see the twin's test
def test_jitter_rewards_as_noiseless_and_only_the_extra_body_follows_the_action():
    plain, jitter = DMCJaxEnv("reacher-easy"), DMCJaxEnv("reacher-easy", "jitter")
    # 30 steps, as the twin's test: the noiseless rollout is then the compiled program that test made (-m slow).
    actions = jax.random.uniform(jax.random.PRNGKey(0), (30, 2), minval=-1, maxval=1)
    a, b = rollout(plain, jax.random.PRNGKey(2), actions), rollout(jitter, jax.random.PRNGKey(2), actions)
    np.testing.assert_array_equal(a[1], b[1])
    other = rollout(jitter, jax.random.PRNGKey(2), -actions)
    da, db = np.asarray(b[2]["distractor_state"][-1]), np.asarray(other[2]["distractor_state"][-1])
    np.testing.assert_array_equal(da[:6], db[:6])        # the twin (reacher: 6 numbers) ignores the action
    assert np.abs(da[6:10] - db[6:10]).max() > 0.1       # the point mass (position, velocity) follows it
    np.testing.assert_array_equal(da[10:], db[10:])      # the jitter walk ignores it
    offset = np.asarray(b[0][-1, :6] - a[0][-1])         # the observed positions are shifted, not the state
    assert np.abs(offset[:2]).max() > 0 and np.abs(offset[2:]).max() == 0
    np.testing.assert_array_equal(a[2]["agent_state"], b[2]["agent_state"])


@pytest.mark.slow  # ~20 s, compile-bound; vmapped MJX envs run with -m slow (also docs/environments.md's block)
def test_vmapped_envs_equal_lone_ones():
    env = DMCJaxEnv("reacher-easy", "noisy_sensor", action_repeat=10)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    actions = jax.random.uniform(jax.random.PRNGKey(1), (3, 4, 2), minval=-1, maxval=1)
    batched = jax.jit(jax.vmap(lambda k, a: rollout(env, k, a)))(keys, actions)
    for i in range(3):  # to float32 rounding (a batched program's fusions differ from a lone one's)
        lone = rollout(env, keys[i], actions[i])
        np.testing.assert_allclose(batched[0][i], lone[0], atol=1e-5)
        np.testing.assert_allclose(batched[1][i], lone[1], atol=1e-5)


def test_episodes_end_on_time():
    actions = jax.random.uniform(jax.random.PRNGKey(1), (4, 2), minval=-1, maxval=1)
    env = DMCJaxEnv("reacher-easy", action_repeat=250)  # 4 agent steps per episode
    state, step = jax.jit(env.reset)(jax.random.PRNGKey(0)), jax.jit(env.step)
    dones = []
    for action in actions:
        state = step(state, action)
        dones.append(bool(state.done))
    assert dones == [False, False, False, True] and env.episode_length == 4


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="task must be one of"):
        DMCJaxEnv("hopper-hop")
    with pytest.raises(ValueError, match="variant must be one of"):
        DMCJaxEnv("cheetah-run", "video")
    with pytest.raises(ValueError, match="action_repeat must be an int >= 1 dividing 1000"):
        DMCJaxEnv("cheetah-run", action_repeat=3)
    with pytest.raises(ValueError, match="num_twins must be an int >= 1"):
        DMCJaxEnv("cheetah-run", "distractors", num_twins=0)
    env = DMCJaxEnv("reacher-easy")
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))  # the shapes suffice: the check comes first
    with pytest.raises(ValueError, match=r"action must have shape \(2,\)"):
        env.step(state, jnp.zeros(3))
