"""Algorithm 1 on DMC at toy size: runs, logs, probes, checkpoints the buffer and resumes exactly."""
import dataclasses
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.common.settings import BUDGET, HOST, fields_on_resume
from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig  # noqa: E402
from platonic_rl.training.run import RunDirectoryError  # noqa: E402
from platonic_rl.benchmarks import dmc_probe  # noqa: E402
from platonic_rl.benchmarks.dmc_probe import latent_probe_data  # noqa: E402
from platonic_rl.training.world_model import (DMCOnlineConfig, open_run_directory, train_dmc_online,  # noqa: E402
                                              xla_convolutions)
from platonic_rl.denoised.model import WorldModelConfig  # noqa: E402
from platonic_rl.envs.replay import SequenceBuffer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402

TOY = DMCOnlineConfig(task="reacher-easy", variant="distractors", env_steps=4000, prefill_steps=2000,
                      updates_per_collect=2, action_repeat=10, batch_size=2, chunk=8, eval_every=2000,
                      distractor="signals", num_distractors=2, checkpoint_every=3, buffer_episodes=5)


def toy_agent():
    model = WorldModelConfig(obs_shape=(8,), action_dim=2, x_belief=8, x_state=2, y_belief=4, y_state=2, hidden=8,
                             embed_dim=8, mlp_encoder_hidden=(8,), mlp_decoder_hidden=(8,))
    return DenoisedMDPAgent.create(DenoisedMDPConfig(model=model, actor_hidden=(8,), critic_hidden=(8,),
                                                     policy="sac"), 0)


@pytest.mark.slow  # ~45 s (compiles the update and act); keeps the default suite under 10 minutes
def test_runs_logs_and_resumes_exactly(tmp_path):
    full, history = train_dmc_online(toy_agent(), TOY)  # no run dir: nothing saved
    assert [r["env_steps"] for r in history] == [1000, 2000, 3000, 4000]
    assert "model_loss" in history[-1] and "eval_return" in history[-1] and "eval_return_std" in history[-1]
    # The prefill's statistics standardise the observations from the first update on (kept across the resume).
    assert float(full.obs_std.min()) > 0 and not np.allclose(full.obs_std, 1.0)
    train_dmc_online(toy_agent(), dataclasses.replace(TOY, env_steps=3000), tmp_path / "split")
    resumed, resumed_history = train_dmc_online(toy_agent(), TOY, tmp_path / "split")
    for a, b in zip(jax.tree.leaves(full.model_params), jax.tree.leaves(resumed.model_params)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_array_equal(resumed.obs_mean, full.obs_mean)
    assert resumed_history[-1]["train_return"] == history[-1]["train_return"]
    logged = [json.loads(line)["env_steps"] for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1000, 2000, 3000, 4000]


def test_a_run_resumes_whatever_the_fields_it_does_not_use_hold(tmp_path):
    """A noiseless run has no distractor: it resumes under any distractor setting; a run with distractors resumes
    only with its own source."""
    from types import SimpleNamespace

    agent = SimpleNamespace(config=dict(model="toy"))  # the run's agent settings: the same throughout
    noiseless = dataclasses.replace(TOY, variant="noiseless")  # TOY's distractor: "signals"
    for variant, resumes in (("noiseless", True), ("distractors", False)):
        run_dir = tmp_path / variant
        open_run_directory(run_dir, agent, dataclasses.replace(noiseless, variant=variant)).close()
        twins = dataclasses.replace(noiseless, variant=variant, distractor="twin", num_twins=3)
        assert twins.unused_fields() == (("distractor", "num_twins", "num_distractors") if resumes
                                         else ("num_distractors",))
        if resumes:
            open_run_directory(run_dir, agent, twins).close()
        else:
            with pytest.raises(RunDirectoryError, match="loop.distractor: saved 'signals', now 'twin'"):
                open_run_directory(run_dir, agent, twins)
            open_run_directory(run_dir, agent, dataclasses.replace(twins, distractor="signals")).close()


def test_a_run_resumes_with_new_host_settings_budget_and_capacity_but_not_new_learning_settings(tmp_path):
    from types import SimpleNamespace

    agent = SimpleNamespace(config=dict(model="toy"))
    open_run_directory(tmp_path, agent, TOY).close()
    host = dict(resume=True, overwrite=False, checkpoint_every=TOY.checkpoint_every + 3, updates_per_call=1)
    assert set(host) == set(fields_on_resume(DMCOnlineConfig, HOST))
    grown = dict(env_steps=TOY.env_steps * 2, buffer_episodes=40)
    assert set(grown) == set(fields_on_resume(DMCOnlineConfig, BUDGET))
    open_run_directory(tmp_path, agent, dataclasses.replace(TOY, **host, **grown)).close()
    for name, value in (("batch_size", TOY.batch_size + 1), ("updates_per_collect", TOY.updates_per_collect * 2)):
        with pytest.raises(RunDirectoryError, match=f"loop.{name}: saved"):
            open_run_directory(tmp_path, agent, dataclasses.replace(TOY, **{name: value}))


@pytest.mark.slow  # ~15 s
def test_probe_data_has_x_and_y_features_per_step():
    data = latent_probe_data(toy_agent(), TOY, episodes=2, seed=0)
    assert data["x"].shape == (2 * 101, 10) and data["y"].shape == (2 * 101, 6)
    assert data["distractor_state"].shape == (2 * 101, 2) and set(np.unique(data["episode"])) == {0, 1}
    assert data["task_state"].shape == (2 * 101, 2)  # reacher's target, one per episode
    assert [len(np.unique(data["task_state"][data["episode"] == i], axis=0)) for i in (0, 1)] == [1, 1]
    first = np.r_[True, np.diff(data["episode"]) != 0]
    assert data["reward"].shape == data["reward_x"].shape == data["reward_y"].shape == (2 * 101,)
    assert np.all(data["reward"][first] == 0) and np.any(data["reward"][~first] != 0)  # as the model is trained
    assert np.all(np.isfinite(data["reward_x"] + data["reward_y"]))
    np.testing.assert_allclose(data["task_reward"], data["reward"], rtol=1e-6)  # no perturbed sensor here
    ahead = data["reward_x_open_loop"]  # r_x from the posterior k = 1..15 steps before (columns)
    assert ahead.shape == (2 * 101, 15)
    step = np.concatenate([np.arange(101)] * 2)
    np.testing.assert_array_equal(np.isnan(ahead), step[:, None] < np.arange(1, 16)[None])


def test_open_loop_rewards_are_placed_at_the_step_they_predict(monkeypatch):
    """``open_loop_reward_x`` moves the rollouts' r_x (row j: after j + 1 prior steps, from each start t) to the
    step they predict, t + j + 1; a stand-in rollout that returns 1000 (j + 1) + t shows where each lands."""
    seen = {}

    def rollouts(agent, start, prev_actions, key, horizon):
        seen.update(start=start, horizon=horizon)
        return 1000.0 * np.arange(1, horizon + 1)[:, None] + np.arange(len(prev_actions))[None]

    monkeypatch.setattr(dmc_probe, "_open_loop", rollouts)
    states = dict(hx=np.zeros((6, 4)), x=np.zeros((6, 2)), hy=np.ones((6, 3)), y=np.ones((6, 1)))
    out = dmc_probe.open_loop_reward_x(None, states, np.zeros((6, 2)), 3, jax.random.PRNGKey(0))
    assert set(seen["start"]) == {"hx", "x"} and seen["horizon"] == 3  # the x prior's rollout starts from x alone
    nan = np.nan
    np.testing.assert_array_equal(out, [[nan, nan, nan], [1000, nan, nan], [1001, 2000, nan], [1002, 2001, 3000],
                                        [1003, 2002, 3001], [1004, 2003, 3002]])
    assert np.isnan(dmc_probe.open_loop_reward_x(None, states, np.zeros((6, 2)), 9, None)[:, 5:]).all()  # > L - 1
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        dmc_probe.open_loop_reward_x(None, states, np.zeros((6, 2)), 0, None)


def test_sequence_buffer_samples_contiguous_chunks_of_one_episode():
    buf = SequenceBuffer.create(capacity=3, length=6, obs_shape=1, action_dim=1)
    for e in range(4):  # the first episode is overwritten
        steps = np.arange(6, dtype=np.float32) + 100 * e
        buf = buf.add(steps[:, None], steps[:, None], steps)
    assert int(buf.size) == 3
    s = buf.sample(jax.random.PRNGKey(0), 64, 4)
    obs = np.asarray(s["observations"][..., 0])
    np.testing.assert_array_equal(np.diff(obs, axis=1), 1.0)  # consecutive steps of one episode
    assert set(np.unique(obs // 100)) == {1.0, 2.0, 3.0}
    np.testing.assert_array_equal(s["rewards"], obs)
    with pytest.raises(ValueError, match="chunk"):
        buf.sample(jax.random.PRNGKey(0), 2, 7)
    with pytest.raises(ValueError, match="observations must have shape"):
        buf.add(np.zeros((5, 1)), np.zeros((6, 1)), np.zeros(6))


@pytest.mark.slow  # ~1-2 min (compiles the conv world model)
def test_pixels_train_from_uint8_sequences(tmp_path):
    pixels = dataclasses.replace(TOY, variant="jitter", observation="pixels", env_steps=3000, num_distractors=0)
    model = WorldModelConfig(obs_shape=(64, 64, 3), action_dim=2, x_belief=8, x_state=2, y_belief=4, y_state=2,
                             hidden=8, embed_dim=16, conv_width=4)
    agent = DenoisedMDPAgent.create(DenoisedMDPConfig(model=model, actor_hidden=(8,), critic_hidden=(8,)), 0)
    trained, history = train_dmc_online(agent, pixels, tmp_path / "run")  # checkpointed as it goes
    assert [r["env_steps"] for r in history] == [1000, 2000, 3000] and np.isfinite(history[-1]["model_loss"])
    assert trained.obs_mean.shape == ()  # pixels are not standardised
    data = latent_probe_data(trained, pixels, episodes=1, seed=0)
    assert data["distractor_state"].shape[1] == 9 + 2  # the video's state and the camera shift


@pytest.mark.slow  # ~15 s (two compiled world-model updates); the split itself (training.updates.update_in_calls, which
# train_chunk calls) is checked fast for QRL in tests/test_online.py and for the offline loop in tests/test_train.py
def test_updates_split_into_calls_are_the_same_updates():
    """One call of 4 updates or 4 calls of 1: the same parameters and metrics."""
    from platonic_rl.training.world_model import train_chunk

    # The recorded "denoised_sac" case's agent (tests/fixtures/update_fixtures.py; 5-d observations, 2-d actions)
    # on its batches' shape, 3 sequences of 4 steps: its create compiles once per suite.
    config = update_fixtures.world_model_config(policy="sac")
    rng = np.random.default_rng(0)
    buffer = SequenceBuffer.create(3, 9, (5,), 2)
    for _ in range(3):
        buffer = buffer.add(rng.normal(size=(9, 5)).astype(np.float32), rng.uniform(-1, 1, (9, 2)).astype(np.float32),
                            rng.normal(size=9).astype(np.float32))
    key = jax.random.PRNGKey(3)
    one, one_metrics = train_chunk(DenoisedMDPAgent.create(config, 0), buffer, key, 4, 3, 4)
    four, four_metrics = train_chunk(DenoisedMDPAgent.create(config, 0), buffer, key, 4, 3, 4, per_call=1)
    for a, b in zip(jax.tree.leaves(one.model_params), jax.tree.leaves(four.model_params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one_metrics["model_loss"], four_metrics["model_loss"], rtol=1e-5)


def test_pixels_with_xla_convolutions_get_one_update_per_call_on_cpu():
    from platonic_rl.training.updates import updates_per_call

    assert updates_per_call(None, 100, convolutions=True) == (1 if jax.default_backend() == "cpu" else 100)
    assert updates_per_call(None, 100, convolutions=False) == 100
    pixels = WorldModelConfig(obs_shape=(64, 64, 3))  # the matmul conv pair has no XLA convolutions to keep out of scans
    assert xla_convolutions(dataclasses.replace(pixels, conv_impl="xla"))
    assert not xla_convolutions(dataclasses.replace(pixels, conv_impl="im2col")) and not xla_convolutions(WorldModelConfig())
    with pytest.raises(ValueError, match="updates_per_call must be a positive divisor"):
        DMCOnlineConfig(updates_per_collect=100, updates_per_call=3)


def test_exploration_draws_from_its_own_stream_not_the_distractors():
    """The env seeded with s draws its distractor signals from default_rng(s); the episode's random actions (and
    exploration noise) come from a stream spawned off s, so they are no copy of the distractors' innovations."""
    from platonic_rl.envs.dmc import DMCEnv
    from platonic_rl.training.world_model import run_episode
    env = DMCEnv("reacher-easy", "distractors", seed=3, action_repeat=50, distractor="signals", num_distractors=2)
    episode = run_episode(env, seed=3)
    own = np.random.default_rng(np.random.SeedSequence(3).spawn(1)[0])
    expected = np.stack([own.uniform(-1, 1, 2) for _ in range(len(episode["prev_actions"]) - 1)])
    np.testing.assert_allclose(episode["prev_actions"][1:], expected, rtol=1e-6)
    shared = np.random.default_rng(3).uniform(-1, 1, 2)
    assert not np.allclose(episode["prev_actions"][1], shared)


def test_saturated_fraction_counts_action_components_at_the_bounds():
    from platonic_rl.training.world_model import saturated_fraction
    actions = np.array([[1.0, -0.96], [0.94, 0.0], [-1.0, 0.95]])  # 0.95 is within 0.05 of 1; 0.94 is not
    assert saturated_fraction(actions) == pytest.approx(4 / 6)
    assert saturated_fraction(actions, margin=0.0) == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="actions is empty"):
        saturated_fraction(np.zeros((0, 2)))
    for margin in (-0.1, 1.0):
        with pytest.raises(ValueError, match="margin must be in \\[0, 1\\)"):
            saturated_fraction(actions, margin=margin)


def test_evaluation_summaries_give_each_episodes_return_and_saturation():
    """Without an agent: the random prefill's episodes, whose uniform actions sit within 0.05 of +-1 5% of the
    time; the returns are run_episode's for the same seeds, and evaluate returns just those."""
    from platonic_rl.envs.dmc import DMCEnv
    from platonic_rl.training.world_model import evaluate, evaluation_summaries, run_episode, saturated_fraction
    env = DMCEnv("reacher-easy", "noiseless", seed=0, action_repeat=10)
    summaries = evaluation_summaries(env, None, [5, 6])
    episodes = [run_episode(env, seed=s) for s in (5, 6)]
    assert [s["episode_return"] for s in summaries] == [e["episode_return"] for e in episodes]
    assert [s["saturated_actions"] for s in summaries] == [saturated_fraction(e["prev_actions"][1:]) for e in episodes]
    assert evaluate(env, None, [5, 6]) == [e["episode_return"] for e in episodes]
    shares = np.mean([s["saturated_actions"] for s in summaries])
    assert 0.0 < shares < 0.15  # 200 components, expected 0.05
