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


@pytest.mark.parametrize("task,dims", [("cheetah-run", (17, 25, 26, 29)), ("reacher-easy", (6, 14, 15, 18))])
def test_variants_shapes_and_seeding(task, dims):
    for variant, dim in zip(("noiseless", "distractors", "noisy_sensor", "jitter"), dims):
        env = DMCEnv(task, variant, seed=0)
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
    env = DMCEnv("reacher-easy", "jitter", seed=0)
    zeros, ones = np.zeros((20, 2)), np.ones((20, 2))
    a, b = rollout(env, zeros, seed=1), rollout(env, ones, seed=1)
    da, db = a[-1][2]["distractor_state"], b[-1][2]["distractor_state"]
    np.testing.assert_array_equal(da[:8], db[:8])  # the smooth signals ignore the action
    assert np.abs(da[8:12] - db[8:12]).max() > 0.1  # the point mass (position, velocity) follows it
    np.testing.assert_array_equal(da[12:], db[12:])  # the jitter walk ignores the action
    assert not np.allclose(a[-1][2]["agent_state"], b[-1][2]["agent_state"])


@pytest.mark.parametrize("task", ["cheetah-run", "walker-walk", "reacher-easy"])
def test_reward_is_the_tasks_reward_of_the_perturbed_sensor(task):
    env = DMCEnv(task, "noisy_sensor", seed=0, action_repeat=1)
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
