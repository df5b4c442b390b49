"""Episode replay buffer: ring insertion, transition consistency and the goal-offset distribution."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.envs.replay import EpisodeBuffer, SequenceBuffer

T, D, A = 5, 2, 1
# Compiled once per shapes (shared by the tests): op by op, each primitive was compiled on its own.
add = jax.jit(EpisodeBuffer.add)
sample = jax.jit(EpisodeBuffer.sample, static_argnames=("batch_size", "p_future", "discount"))


def episodes(start, count):
    """Episode e has observations obs[e, t] = (e, t) and actions a[e, t] = 10 e + t: easy to trace."""
    e = np.arange(start, start + count)[:, None, None]
    t = np.arange(T + 1)[None, :, None]
    obs = np.concatenate(np.broadcast_arrays(e, t), axis=-1).astype(np.float32)
    actions = (10 * e + np.arange(T)[None, :, None]).astype(np.float32)
    return obs, actions


def test_ring_insertion_overwrites_oldest():
    buf = EpisodeBuffer.create(capacity=4, horizon=T, obs_shape=D, action_dim=A)
    buf = add(buf, *episodes(0, 3))
    assert int(buf.size) == 3 and int(buf.insert_at) == 3
    buf = add(buf, *episodes(3, 3))  # episodes 3, 4, 5: 4 and 5 overwrite 0 and 1
    assert int(buf.size) == 4 and int(buf.insert_at) == 2
    np.testing.assert_array_equal(np.asarray(buf.observations[:, 0, 0]), [4, 5, 2, 3])


def test_resizing_keeps_every_episode_oldest_first():
    wrapped = EpisodeBuffer.create(capacity=4, horizon=T, obs_shape=D, action_dim=A)
    wrapped = add(add(wrapped, *episodes(0, 3)), *episodes(3, 3))
    grown = wrapped.resized(6)  # rows held 4, 5, 2, 3 (see above): oldest first is 2, 3, 4, 5
    np.testing.assert_array_equal(np.asarray(grown.observations[:, 0, 0]), [2, 3, 4, 5, 0, 0])
    np.testing.assert_array_equal(np.asarray(grown.actions[:4, 1, 0]), [21, 31, 41, 51])
    assert int(grown.size) == 4 and int(grown.insert_at) == 4
    assert np.asarray(add(grown, *episodes(6, 3)).observations[:, 0, 0]).tolist() == [8, 3, 4, 5, 6, 7]
    # A buffer that never wrapped, grown, samples exactly like one created at the larger size.
    small = add(EpisodeBuffer.create(capacity=5, horizon=T, obs_shape=D, action_dim=A), *episodes(0, 3))
    big = add(EpisodeBuffer.create(capacity=9, horizon=T, obs_shape=D, action_dim=A), *episodes(0, 3))
    for (name, a), b in zip(sample(small.resized(9), jax.random.PRNGKey(1), 64).items(),
                            sample(big, jax.random.PRNGKey(1), 64).values()):
        np.testing.assert_array_equal(a, b, err_msg=name)
    with pytest.raises(ValueError, match="capacity 3 cannot hold the 4 stored episodes"):
        wrapped.resized(3)
    with pytest.raises(ValueError, match="positive int"):
        wrapped.resized(0)


def test_sequence_buffer_resizes_like_the_episode_buffer():
    buf = SequenceBuffer.create(capacity=3, length=2, obs_shape=1, action_dim=1)
    for i in range(4):  # the fourth overwrites the first
        buf = buf.add(np.full((2, 1), i), np.zeros((2, 1)), np.full(2, 10.0 * i))
    grown = buf.resized(5)
    np.testing.assert_array_equal(np.asarray(grown.rewards[:, 0]), [10, 20, 30, 0, 0])
    assert int(grown.size) == 3 and int(grown.insert_at) == 3


def test_samples_are_consistent_transitions_with_future_goals():
    buf = add(EpisodeBuffer.create(capacity=8, horizon=T, obs_shape=D, action_dim=A), *episodes(0, 8))
    s = sample(buf, jax.random.PRNGKey(0), 4096)
    e, t = np.asarray(s["observations"]).T
    np.testing.assert_array_equal(np.asarray(s["next_observations"]), np.stack([e, t + 1], 1))
    np.testing.assert_array_equal(np.asarray(s["actions"])[:, 0], 10 * e + t)
    ge, gt = np.asarray(s["goals"]).T
    np.testing.assert_array_equal(ge, e)                       # same episode
    np.testing.assert_array_equal(gt - t, np.asarray(s["goal_offsets"]))
    assert (gt >= t).all() and (gt <= T).all()


def test_goal_offset_follows_truncated_geometric():
    horizon, discount = 50, 0.9
    buf = EpisodeBuffer.create(capacity=2, horizon=horizon, obs_shape=1, action_dim=1)
    buf = add(buf, jnp.zeros((2, horizon + 1, 1)), jnp.zeros((2, horizon, 1)))
    s = sample(buf, jax.random.PRNGKey(1), 200_000, discount=discount)
    t, k = np.asarray(s["step"]), np.asarray(s["goal_offsets"])
    for t0 in (0, 40, 49):  # K = 50, 10, 1
        ks = k[t == t0]
        max_k = horizon - t0
        expected = discount ** np.arange(max_k + 1)
        expected /= expected.sum()
        observed = np.bincount(ks, minlength=max_k + 1) / len(ks)
        assert len(observed) == max_k + 1
        np.testing.assert_allclose(observed, expected, atol=4 * np.sqrt(expected.max() / len(ks)))


def test_random_goals_cover_the_buffer():
    buf = add(EpisodeBuffer.create(capacity=8, horizon=T, obs_shape=D, action_dim=A), *episodes(0, 6))
    s = sample(buf, jax.random.PRNGKey(2), 20_000, p_future=0.0)
    assert (np.asarray(s["goal_offsets"]) == -1).all()
    ge, gt = np.asarray(s["goals"]).T
    assert set(ge.astype(int)) == set(range(6))  # only stored episodes
    assert set(gt.astype(int)) == set(range(T + 1))
    mixed = sample(buf, jax.random.PRNGKey(3), 20_000, p_future=0.7)
    assert np.mean(np.asarray(mixed["goal_offsets"]) >= 0) == pytest.approx(0.7, abs=0.02)


def test_sampled_states_are_stored_steps_uniformly():
    buf = add(EpisodeBuffer.create(capacity=8, horizon=T, obs_shape=D, action_dim=A), *episodes(0, 3))
    states = np.asarray(jax.jit(EpisodeBuffer.sample_states, static_argnames="count")(
        buf, jax.random.PRNGKey(4), count=18_000)).astype(int)
    assert states.shape == (18_000, D)
    cells, counts = np.unique(states, axis=0, return_counts=True)
    # Every (episode, step) of the 3 stored episodes, the last observation included, and nothing else, each
    # 18,000 / 18 = 1,000 times (binomial std ~30).
    assert [tuple(c) for c in cells] == [(e, t) for e in range(3) for t in range(T + 1)]
    assert np.all(np.abs(counts - 1000) < 150)


def test_bad_input():
    buf = EpisodeBuffer.create(capacity=2, horizon=T, obs_shape=D, action_dim=A)
    with pytest.raises(ValueError, match="count must be an int >= 1"):
        buf.sample_states(jax.random.PRNGKey(0), 0)
    with pytest.raises(ValueError, match="observations must have shape"):
        buf.add(np.zeros((1, T, D)), np.zeros((1, T, A)))
    with pytest.raises(ValueError, match="capacity"):
        buf.add(*episodes(0, 3))
    with pytest.raises(ValueError, match="p_future in"):
        buf.sample(jax.random.PRNGKey(0), 8, p_future=1.5)
    with pytest.raises(ValueError, match="horizon"):
        EpisodeBuffer.create(capacity=2, horizon=0, obs_shape=D, action_dim=A)


def test_image_episodes_are_stored_as_uint8_frames():
    frames = np.random.default_rng(0).integers(0, 256, (3, T + 1, 8, 8, 3), dtype=np.uint8)
    acts = np.zeros((3, T, A), np.float32)
    buf = EpisodeBuffer.create(capacity=4, horizon=T, obs_shape=(8, 8, 3), action_dim=A, dtype=jnp.uint8)
    buf = add(buf, jnp.asarray(frames), jnp.asarray(acts))
    s = sample(buf, jax.random.PRNGKey(0), 16)
    assert s["observations"].dtype == jnp.uint8 and s["goals"].shape == (16, 8, 8, 3)
    e, t = np.asarray(s["episode"]), np.asarray(s["step"])
    np.testing.assert_array_equal(s["next_observations"], frames[e, t + 1])
    with pytest.raises(ValueError, match="observations must have shape"):
        buf.add(jnp.zeros((1, T + 1, 8, 8)), jnp.asarray(acts[:1]))
    with pytest.raises(ValueError, match="obs_shape"):
        EpisodeBuffer.create(capacity=4, horizon=T, obs_shape=(8, 0, 3), action_dim=A)
