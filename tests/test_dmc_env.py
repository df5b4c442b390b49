"""DMC with noise distractors: variants, seeding, reward from the perturbed sensor, (un)controllability."""
import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.envs.dmc import DMCEnv, JitterWalk, SmoothSignals  # noqa: E402


def rollout(env, actions, seed):
    obs, info = env.reset(seed=seed)
    out = [(obs, 0.0, info)]
    for a in actions:
        obs, reward, _, _, info = env.step(a)
        out.append((obs, reward, info))
    return out


@pytest.mark.parametrize("task,distractor,dims", [
    ("cheetah-run", "signals", (17, 25, 26, 29)),      # + 8 signals; + the perturbed sensor; + point mass (4)
    ("reacher-easy", "signals", (6, 14, 15, 18)),
    ("cheetah-run", "twin", (17, 34, 36, 38)),         # + the twin's 17; + the noise signal and the sensor; + 4
    ("reacher-easy", "twin", (6, 12, 14, 16))])
def test_variants_shapes_and_seeding(task, distractor, dims):
    for variant, dim in zip(("noiseless", "distractors", "noisy_sensor", "jitter"), dims):
        env = DMCEnv(task, variant, seed=0, distractor=distractor)
        assert env.observation_space.shape == (dim,)
        actions = np.random.default_rng(0).uniform(-1, 1, (5, env.action_space.shape[0]))
        a, b = rollout(env, actions, seed=3), rollout(env, actions, seed=3)
        for (o1, r1, i1), (o2, r2, i2) in zip(a, b):
            np.testing.assert_array_equal(o1, o2)
            assert r1 == r2
            np.testing.assert_array_equal(i1["distractor_state"], i2["distractor_state"])
        full = env._env.physics.get_state()
        if task == "cheetah-run":  # the horizontal root position is left out: observations ignore it
            np.testing.assert_array_equal(a[-1][2]["agent_state"], full[1:].astype(np.float32))
        else:
            np.testing.assert_array_equal(a[-1][2]["agent_state"], full.astype(np.float32))
        if variant == "noiseless":
            assert a[0][2]["distractor_state"].shape == (0,)


def test_distractor_signals_are_uncontrollable_and_the_extra_body_is_controllable():
    env = DMCEnv("reacher-easy", "jitter", seed=0, distractor="signals")
    zeros, ones = np.zeros((20, 2)), np.ones((20, 2))
    a, b = rollout(env, zeros, seed=1), rollout(env, ones, seed=1)
    da, db = a[-1][2]["distractor_state"], b[-1][2]["distractor_state"]
    np.testing.assert_array_equal(da[:8], db[:8])  # the smooth signals ignore the action
    assert np.abs(da[8:12] - db[8:12]).max() > 0.1  # the point mass (position, velocity) follows it
    np.testing.assert_array_equal(da[12:], db[12:])  # the jitter walk ignores the action
    assert not np.allclose(a[-1][2]["agent_state"], b[-1][2]["agent_state"])


@pytest.mark.parametrize("task,distractor", [("cheetah-run", "twin"), ("walker-walk", "signals"),
                                             ("reacher-easy", "twin")])
def test_reward_is_the_tasks_reward_of_the_perturbed_sensor(task, distractor):
    env = DMCEnv(task, "noisy_sensor", seed=0, action_repeat=1, distractor=distractor)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(30):
        time_step = env._env.step(rng.uniform(-1, 1, env.action_space.shape))
        # With the unperturbed sensor, the re-implemented reward equals dm_control's own reward.
        np.testing.assert_allclose(env._reward_from_sensor(env._sensor()), time_step.reward, rtol=1e-6)
    obs, reward, *_ = env.step(np.zeros(env.action_space.shape))
    np.testing.assert_allclose(reward, env._reward_from_sensor(env._sensor() + env._sensor_scale()
                                                               * env._signals.value[0]), rtol=1e-6)
    assert obs[-1] == pytest.approx(env._perturbed_sensor(), rel=1e-5)  # the sensor is observed


def test_processes_stay_bounded_and_smooth():
    signals = SmoothSignals(4, np.random.default_rng(0))
    values = np.array([signals.step() for _ in range(2000)])
    assert np.abs(values).max() < 0.5 and np.abs(np.diff(values, axis=0)).max() < 0.15
    assert values.std(0).min() > 0.1  # they do move
    walk = JitterWalk(3, np.random.default_rng(0))
    offsets = np.array([walk.step() for _ in range(5000)])
    assert np.abs(offsets).max() < 10.0 * 0.3 and np.abs(np.diff(offsets, axis=0)).max() < 0.2


def test_bad_arguments():
    with pytest.raises(ValueError, match="task must be"):
        DMCEnv("cartpole-swingup")
    with pytest.raises(ValueError, match="variant must be"):
        DMCEnv("cheetah-run", "video")
    with pytest.raises(ValueError, match="action_repeat"):
        DMCEnv("cheetah-run", action_repeat=3)
    env = DMCEnv("reacher-easy")
    with pytest.raises(ValueError, match="action must have shape"):
        env.step(np.zeros(3))


def ar2_explained_variance(x: np.ndarray) -> np.ndarray:
    """Per column of ``x`` [T, D]: the R^2 of the least-squares fit x_t ~ a x_{t-1} + b x_{t-2} + c."""
    out = []
    for column in x.T:
        design = np.stack([column[1:-1], column[:-2], np.ones(len(column) - 2)], 1)
        coef, *_ = np.linalg.lstsq(design, column[2:], rcond=None)
        out.append(1.0 - np.var(column[2:] - design @ coef) / np.var(column[2:]))
    return np.array(out)


@pytest.mark.parametrize("task", ["cheetah-run", "reacher-easy"])
def test_twin_is_uncontrollable_and_leaves_the_agent_and_its_reward_alone(task):
    """The agent's observation, state and reward under the twin equal the noiseless env's, step for step; the twin
    is the same whatever the agent does; the twins differ between seeds and between twins."""
    noiseless = DMCEnv(task, "noiseless", seed=0)
    twin = DMCEnv(task, "distractors", seed=0, num_twins=2)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (40, noiseless.action_space.shape[0]))
    plain, with_twin = rollout(noiseless, actions, seed=5), rollout(twin, actions, seed=5)
    size = noiseless.observation_space.shape[0]
    assert twin.observation_space.shape == (3 * size,)
    for (o1, r1, i1), (o2, r2, i2) in zip(plain, with_twin):
        np.testing.assert_array_equal(o1, o2[:size])
        assert r1 == r2
        np.testing.assert_array_equal(i1["agent_state"], i2["agent_state"])
        np.testing.assert_array_equal(o2[size:], i2["distractor_state"])  # what is observed is the distractor
    other = rollout(twin, -actions, seed=5)
    for (_, _, i1), (_, _, i2) in zip(with_twin, other):
        np.testing.assert_array_equal(i1["distractor_state"], i2["distractor_state"])
    assert not np.allclose(with_twin[-1][2]["agent_state"], other[-1][2]["agent_state"])
    last = with_twin[-1][0]
    assert not np.allclose(last[size:2 * size], last[2 * size:])  # two twins, two bodies
    assert not np.allclose(rollout(twin, actions, seed=6)[-1][0][size:], last[size:])


def test_twin_is_hard_to_predict_from_its_past_and_the_signals_are_not():
    """The point of the twin: an AR(2) fit per dimension explains much less of it than of the smooth signals (on 1000
    cheetah steps: the twin's mean R^2 about 0.6, the signals' above 0.99), and it moves at the body's own scale."""
    streams = {}
    for distractor in ("twin", "signals"):
        env = DMCEnv("cheetah-run", "distractors", seed=0, distractor=distractor)
        actions = np.random.default_rng(1).uniform(-1, 1, (500, 6))
        streams[distractor] = np.stack([info["distractor_state"] for *_, info in rollout(env, actions, seed=0)])
    twin, signals = ar2_explained_variance(streams["twin"]), ar2_explained_variance(streams["signals"])
    assert signals.mean() > 0.99 and twin.mean() < 0.8
    assert streams["twin"].std(0).max() > 2.0  # velocities of metres and radians per second, not a squashed signal


def test_task_state_is_reachers_target_which_no_action_moves_and_the_reward_measures_from():
    """reacher's ``task_state`` is the target's position: the finger's distance to it is the task's sensor, it holds
    for the whole episode whatever the actions, and a new episode draws another; cheetah and walker have none."""
    env = DMCEnv("reacher-easy", "distractors", seed=0)
    zeros, ones = np.zeros((30, 2)), np.ones((30, 2))
    a, b = rollout(env, zeros, seed=1), rollout(env, ones, seed=1)
    target = a[0][2]["task_state"]
    assert target.shape == (2,) and np.linalg.norm(target) > 0.05
    for steps in (a, b):
        for _, _, info in steps:
            np.testing.assert_array_equal(info["task_state"], target)
    assert not np.allclose(a[-1][2]["agent_state"], b[-1][2]["agent_state"])  # the actions moved the arm
    finger = env._env.physics.named.data.geom_xpos["finger", :2]
    assert np.linalg.norm(finger - target) == pytest.approx(env._sensor(), rel=1e-5)
    assert not np.allclose(rollout(env, zeros[:1], seed=2)[0][2]["task_state"], target)
    for task in ("cheetah-run", "walker-walk"):
        _, info = DMCEnv(task, "noiseless", seed=0).reset(seed=0)
        assert info["task_state"].shape == (0,)


def test_task_reward_is_what_the_unperturbed_task_pays():
    """``task_reward`` is the step's reward wherever the sensor is not perturbed; with the noisy sensor it is the
    reward the noiseless task pays for the same actions (the agent's body moves the same: the noise only changes
    what is observed and paid), and differs from the received reward."""
    actions = np.random.default_rng(0).uniform(-1, 1, (40, 6))
    plain = rollout(DMCEnv("walker-walk", "noiseless", seed=0), actions, seed=3)
    twin = rollout(DMCEnv("walker-walk", "distractors", seed=0), actions, seed=3)
    noisy = rollout(DMCEnv("walker-walk", "noisy_sensor", seed=0), actions, seed=3)
    for steps in (plain, twin):
        assert [info["task_reward"] for _, _, info in steps] == pytest.approx([r for _, r, _ in steps])
    assert [info["task_reward"] for _, _, info in noisy] == pytest.approx([r for _, r, _ in plain])
    assert noisy[0][2]["task_reward"] == 0.0 and sum(r for _, r, _ in plain) > 0
    assert not np.allclose([r for _, r, _ in noisy], [r for _, r, _ in plain])


def test_distractor_arguments_are_checked():
    with pytest.raises(ValueError, match="distractor must be one of"):
        DMCEnv("reacher-easy", "distractors", distractor="video")
    with pytest.raises(ValueError, match="num_distractors counts the smooth signals"):
        DMCEnv("reacher-easy", "distractors", num_distractors=4)
    with pytest.raises(ValueError, match="num_twins is for distractor='twin'"):
        DMCEnv("reacher-easy", "distractors", distractor="signals", num_twins=2)
    with pytest.raises(ValueError, match="num_twins must be an int >= 1"):
        DMCEnv("reacher-easy", "distractors", num_twins=0)
    assert DMCEnv("reacher-easy", "noiseless", num_twins=0).observation_space.shape == (6,)  # nothing to add


def test_jitter_with_a_twin_rewards_as_noiseless_and_only_the_extra_body_follows_the_action():
    """jitter = twin + a point mass the action drives + a random walk on the observed positions: the reward is the
    noiseless task's; among the distractor variables only the point mass depends on the action."""
    noiseless, jitter = DMCEnv("reacher-easy", "noiseless", seed=0), DMCEnv("reacher-easy", "jitter", seed=0)
    actions = np.random.default_rng(0).uniform(-1, 1, (25, 2))
    plain, jittered = rollout(noiseless, actions, seed=2), rollout(jitter, actions, seed=2)
    assert [r for _, r, _ in plain] == [r for _, r, _ in jittered]
    other = rollout(jitter, -actions, seed=2)
    da, db = jittered[-1][2]["distractor_state"], other[-1][2]["distractor_state"]
    np.testing.assert_array_equal(da[:6], db[:6])        # the twin (reacher: 6 numbers) ignores the action
    assert np.abs(da[6:10] - db[6:10]).max() > 0.1       # the point mass (position, velocity) follows it
    np.testing.assert_array_equal(da[10:], db[10:])      # the jitter walk ignores it
    offset = jittered[-1][0][:6] - plain[-1][0]          # the observed positions are shifted, not the state
    assert np.abs(offset[:2]).max() > 0 and np.array_equal(jittered[-1][2]["agent_state"], plain[-1][2]["agent_state"])


def test_walkers_observed_height_is_the_perturbed_sensor():
    """noisy_sensor on walker-walk: the observed ``height`` carries the same perturbation as the sensor the reward
    reads (torso height + 1.2 n), which the observation also ends with."""
    env = DMCEnv("walker-walk", "noisy_sensor", seed=0)
    obs, _ = env.reset(seed=0)
    height = 14  # walker's observation: orientations (14), height (1), velocity (9), then the distractors
    for _ in range(5):
        np.testing.assert_allclose(obs[height], obs[-1], rtol=1e-6)
        np.testing.assert_allclose(obs[-1], env._perturbed_sensor(), rtol=1e-6)
        assert abs(obs[height] - env._sensor()) > 1e-4  # perturbed, not the true height
        obs, *_ = env.step(np.zeros(env.action_space.shape))


def test_walkers_agent_state_leaves_out_rootx_and_keeps_rootz():
    """Walker's qpos starts with rootz (its height), then rootx (the horizontal position no observation reads):
    ``agent_state`` leaves out rootx, wherever a task keeps it."""
    env = DMCEnv("walker-walk", "noiseless", seed=0)
    _, info = env.reset(seed=0)
    qpos, qvel = env._env.physics.data.qpos, env._env.physics.data.qvel
    np.testing.assert_array_equal(info["agent_state"], np.concatenate([qpos[[0]], qpos[2:], qvel]).astype(np.float32))
    assert env.position_dims == 8
