"""benchmarks/dmc.py: Table D.5 betas, summaries, the printed table and the plots (synthetic runs)."""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.benchmarks import dmc as bd  # noqa: E402
from platonic_rl.benchmarks import presets  # noqa: E402
from platonic_rl.benchmarks.presets import DMCMethodSettings as Settings  # noqa: E402
from platonic_rl.envs.dmc import TASKS, VARIANTS  # noqa: E402
from platonic_rl.training.run import RUN_FORMAT  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402
from arbitrary import arbitrary_like  # noqa: E402


def fake_run(task, variant, method, returns, probe):
    return dict(task=task, variant=variant, method=method, seed=0, env_steps=[1000, 2000], train_return=[1.0, 2.0],
                eval_steps=[1000, 2000], eval_return=returns, probe=probe)


def test_betas_cover_every_setting_and_noiseless_is_unregularised():
    for task in TASKS:
        assert set(bd.BETAS[task]) == set(VARIANTS) and bd.BETAS[task]["noiseless"] == 1.0
        assert all(0 < b <= 1 for b in bd.BETAS[task].values())


def test_summary_table_and_plots(tmp_path):
    runs = [fake_run("cheetah-run", "distractors", "denoised", [10.0, 30.0],
                     {"x->agent_state": 0.8, "x->distractor_state": 0.1, "y->agent_state": 0.0,
                      "y->distractor_state": 0.9, "r_x->reward": 0.2, "r_x->reward (affine)": 0.5,
                      "r_x+r_y->reward": 0.9}),
            fake_run("reacher-easy", "distractors", "denoised", [50.0, 70.0],
                     {"x->agent_state": 0.6, "x->distractor_state": 0.3, "y->agent_state": 0.2,
                      "y->distractor_state": 0.7, "r_x->reward": 0.4, "r_x->reward (affine)": 0.7,
                      "r_x+r_y->reward": 0.8}),
            fake_run("cheetah-run", "distractors", "dreamer", [5.0, 5.0],
                     {"x->agent_state": 0.9, "x->distractor_state": 0.95, "r_x->reward": 0.7})]
    summary = bd.summarise(runs)
    entry = summary["distractors"]["denoised"]
    assert entry["mean_return"] == pytest.approx((30.0 + 70.0) / 2)  # the evaluation at the budget, over tasks
    assert entry["mean_probe"]["x->distractor_state"] == pytest.approx(0.2)
    args = bd.Args(tasks=("cheetah-run", "reacher-easy"), variants=("distractors",), out_dir=str(tmp_path))
    table = bd.format_table(args, summary)
    assert "597.7" in table and "227.8" in table  # Table 5.1's video-background row, for orientation
    assert "dreamer" in table and table.splitlines()[-1].split()[5] == "-"  # Dreamer has no y
    rows = {line.split()[1]: line.split() for line in table.splitlines() if line.startswith("distractors")}
    assert rows["denoised"][7:10] == ["0.300", "0.600", "0.850"]  # the reward heads: r_x, r_x affine, r_x + r_y
    assert rows["dreamer"][7:10] == ["0.700", "-", "-"]  # a record probed before the affine read-out: "-"
    older = dict(runs[0], seed=1, probe={k: v for k, v in runs[0]["probe"].items() if not k.startswith("r_")})
    assert np.isnan(bd.summarise(runs + [older])["distractors"]["denoised"]["mean_probe"]["r_x->reward"])  # not all
    second_seed = dict(runs[0], seed=1, eval_return=[0.0, 50.0])
    assert bd.per_task_returns(runs + [second_seed])[("cheetah-run", "distractors", "denoised")] == {0: 30.0, 1: 50.0}
    per_task = bd.format_table(args, summary, runs + [second_seed]).splitlines()
    row = next(line for line in per_task if line.startswith("cheetah-run") and "denoised" in line)
    assert row.split()[3:5] == ["40.0", "10.0"] and "0: 30.0, 1: 50.0" in row  # mean, std over seeds; each seed
    bd.plot(tmp_path, args, runs, summary)
    assert (tmp_path / "returns.png").stat().st_size > 0 and (tmp_path / "probe.png").stat().st_size > 0
    longest = dataclasses.replace(args, agent=Settings(beta=0.125, alpha=0.3, imagine_starts=512), probe_train=20)
    fig = bd.plot_probe(tmp_path / "probe_long.png", longest, summary)  # the settings' line wraps inside the picture
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    box = fig.axes[0].title.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    assert "alpha 0.3" in fig.axes[0].get_title() and 0 <= box.x0 and box.x1 <= fig.bbox.width
    one = bd.Args(**{**vars(longest), "tasks": ("reacher-easy",), "final_eval_episodes": 100})
    final = dict(runs[1], final_evaluation=dict(episodes=100, first_seed=0, returns=[60.0] * 100, mean=60.0, std=0.0,
                                                saturated_actions=0.5))
    fig = bd.plot_returns(tmp_path / "returns_one.png", one, [final], {})  # the narrowest picture: one panel
    box = fig._suptitle.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    assert "diamonds: final evaluation" in fig._suptitle.get_text() and 0 <= box.x0 and box.x1 <= fig.bbox.width
    noiseless = fake_run("cheetah-run", "noiseless", "dreamer", [9.0, 9.0], {"x->agent_state": 0.9,
                                                                            "x->distractor_state": float("nan")})
    pixels = bd.Args(tasks=("cheetah-run",), variants=("noiseless",), observation="pixels", out_dir=str(tmp_path))
    ax = bd.plot_returns(tmp_path / "returns_pixels.png", pixels, [noiseless], {}).axes[0]
    anchor = [line for line in ax.get_lines() if line.get_label() == "pixel Dreamer at 100k (CURL)"]
    assert len(anchor) == 1 and list(anchor[0].get_ydata()) == [235.0, 235.0]  # the pixel control's yardstick
    only_dreamer = bd.summarise(runs[2:] + [noiseless])  # bars and n/a marks for the methods run, inside the axes
    ax = bd.plot_probe(tmp_path / "probe_dreamer.png", args, only_dreamer).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["dreamer x->agent", "dreamer x->distractor"]
    low, high = ax.get_xlim()
    assert all(low < patch.get_x() and patch.get_x() + patch.get_width() < high for patch in ax.patches)
    assert [t.get_text() for t in ax.texts] == ["n/a"] and low < ax.texts[0].get_position()[0] < high
    assert np.isnan(bd.summarise([fake_run("reacher-easy", "noiseless", "dreamer", [1.0, 1.0],
                                           {"x->distractor_state": float("nan")})])
                    ["noiseless"]["dreamer"]["mean_probe"]["x->distractor_state"])


def test_the_probe_reads_the_task_state_from_each_factor_only_where_the_task_has_one(monkeypatch):
    """Synthetic probe data: x holds the task state (a target per episode) linearly, y only noise; the probe scores
    x -> task_state near 1 and y -> task_state near or below 0; a task without a task state gets no such keys."""
    rng = np.random.default_rng(0)
    episodes, steps = 30, 20
    episode = np.repeat(np.arange(episodes), steps)
    target = np.repeat(rng.uniform(-0.2, 0.2, (episodes, 2)), steps, axis=0)
    agent_state = rng.normal(size=(len(episode), 4))

    def data(task_dims):
        x = np.concatenate([agent_state, target @ rng.normal(size=(2, 3))], 1)
        x = x + 0.01 * rng.normal(size=x.shape)
        return dict(x=x, y=rng.normal(size=(len(episode), 5)), agent_state=agent_state,
                    distractor_state=rng.normal(size=(len(episode), 3)), task_state=target[:, :task_dims],
                    reward=agent_state[:, 0], reward_x=agent_state[:, 0], reward_y=np.zeros(len(episode)),
                    task_reward=agent_state[:, 0], episode=episode)

    args = bd.Args(probe_train=20, probe_test=10)
    monkeypatch.setattr(bd, "latent_probe_data", lambda agent, loop, n, seed: data(2))
    scores = bd.probe(None, None, args, 0)
    assert scores["x->task_state"] > 0.8 and scores["y->task_state"] < 0.1  # ridge shrinks a 20-target fit
    assert scores["r_x->reward"] == scores["r_x->reward (affine)"] == 1.0  # r_x is the reward itself
    assert "r_x->task_reward (affine)" not in scores  # the received reward is the task's: no second read-out
    noisy = dict(data(2), reward=agent_state[:, 0] + agent_state[:, 1])  # + a noise the task does not pay
    monkeypatch.setattr(bd, "latent_probe_data", lambda agent, loop, n, seed: noisy)
    scores = bd.probe(None, None, args, 0)
    assert scores["r_x->task_reward (affine)"] == pytest.approx(1.0)  # r_x holds all of the task's reward
    assert scores["r_x->reward (affine)"] == pytest.approx(0.5, abs=0.1)  # half of the received reward's variance
    monkeypatch.setattr(bd, "latent_probe_data", lambda agent, loop, n, seed: data(0))
    assert not [key for key in bd.probe(None, None, args, 0) if "task_state" in key]


def test_the_open_loop_readouts_score_r_x_where_the_prior_reached_and_skip_the_rest(monkeypatch):
    """r_x predicted k steps ahead: exact at k = 1, a scaled copy plus as much noise as signal at k = 5 (affine R^2
    1 / 2), the wrong sign at k = 15; the first k steps of each episode (NaN: nothing k steps before) are skipped."""
    rng = np.random.default_rng(1)
    episodes, steps = 30, 40
    episode = np.repeat(np.arange(episodes), steps)
    reward = rng.normal(size=len(episode))
    noise = rng.normal(size=len(episode))
    noise = noise - reward * (noise @ reward) / (reward @ reward)  # orthogonal to the reward ...
    noise *= np.linalg.norm(reward) / np.linalg.norm(noise)        # ... and as large
    ahead = np.stack([reward] * 15, 1)
    ahead[:, 4] = 3.0 * (reward + noise) + 7.0
    ahead[:, 14] = -reward
    step = np.tile(np.arange(steps), episodes)
    ahead[step[:, None] < np.arange(1, 16)[None]] = np.nan
    data = dict(x=rng.normal(size=(len(episode), 3)), agent_state=rng.normal(size=(len(episode), 2)),
                distractor_state=rng.normal(size=(len(episode), 2)), task_state=np.zeros((len(episode), 0)),
                reward=reward, reward_x=reward, task_reward=reward, reward_x_open_loop=ahead, episode=episode)
    monkeypatch.setattr(bd, "latent_probe_data", lambda agent, loop, n, seed: data)
    scores = bd.probe(None, None, bd.Args(probe_train=20, probe_test=10), 0)
    assert scores["r_x->task_reward (affine), 1 steps open loop"] == pytest.approx(1.0)
    # the skipped steps move the orthogonality only a little: about 1 / 2
    assert scores["r_x->task_reward (affine), 5 steps open loop"] == pytest.approx(0.5, abs=0.05)
    assert scores["r_x->task_reward (affine), 15 steps open loop"] == pytest.approx(-1.0)
    assert not [key for key in scores if "open loop" in key and not np.isfinite(scores[key])]
    assert "r_x->reward (affine), 1 steps open loop" not in scores  # received = the task's reward: one read-out
    noisy = dict(data, reward=2.0 * reward)  # the received reward differs from the task's (here only in scale)
    monkeypatch.setattr(bd, "latent_probe_data", lambda agent, loop, n, seed: noisy)
    scores = bd.probe(None, None, bd.Args(probe_train=20, probe_test=10), 0)
    assert scores["r_x->reward (affine), 15 steps open loop"] == pytest.approx(-1.0)


def test_unknown_settings_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown task"):
        bd.run(bd.Args(tasks=("cartpole",), out_dir=str(tmp_path)))
    with pytest.raises(ValueError, match="unknown variant"):
        bd.run(bd.Args(variants=("video",), out_dir=str(tmp_path)))


def test_factor_reconstructions_decode_each_factor_with_the_other_held_at_its_episode_mean():
    import jax
    import jax.numpy as jnp

    from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent
    from platonic_rl.denoised.model import all_features, observe

    # The agents of the recorded cases (tests/fixtures/update_fixtures.py; 5-d observations, 2-d actions): their
    # create compiles once per suite.
    config = update_fixtures.world_model_config()
    model = config.model
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(7, 5)).astype(np.float32) * 3 + 1
    prev_actions = rng.uniform(-1, 1, (7, 2)).astype(np.float32)
    agent = DenoisedMDPAgent.create(config, 0)
    agent = agent.with_observation_statistics(observations)
    key = jax.random.PRNGKey(1)
    out = bd.factor_reconstructions(agent, observations, prev_actions, key)
    assert set(out) == {"all", "x", "y"} and all(v.shape == (7, 5) for v in out.values())
    # By hand: y's belief and state replaced by their means over the 7 steps before decoding, then back to
    # observation units.
    states, _ = jax.jit(observe, static_argnums=0)(model, agent.model_params,
                                                   agent.normalise(jnp.asarray(observations))[None],
                                                   jnp.asarray(prev_actions)[None], key)
    held = dict(states, y=np.repeat(np.mean(states["y"], 1, keepdims=True), 7, 1),
                hy=np.repeat(np.mean(states["hy"], 1, keepdims=True), 7, 1))
    decode = jax.jit(lambda params, held: agent.model.apply(params, all_features(model, held), method="decode")[0])
    by_hand = decode(agent.model_params, held) * agent.obs_std + agent.obs_mean
    np.testing.assert_allclose(out["x"], by_hand, rtol=1e-5, atol=1e-5)
    assert not np.allclose(out["x"], out["y"]) and not np.allclose(out["x"], out["all"])
    # Refused before anything is computed: an agent with arbitrary parameters (tests/fixtures/arbitrary.py) will do.
    dreamer_config = update_fixtures.world_model_config(dreamer=True)
    dreamer = arbitrary_like(jax.eval_shape(lambda: DenoisedMDPAgent.create(dreamer_config, 0)))
    with pytest.raises(ValueError, match="needs a model with a y factor"):
        bd.factor_reconstructions(dreamer, observations, prev_actions, key)


@pytest.mark.slow  # ~1 min: a 500-step pixel episode and a small conv model
def test_reconstruction_picture_from_pixels(tmp_path):
    from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
    from platonic_rl.denoised.model import WorldModelConfig
    from platonic_rl.training.world_model import DMCOnlineConfig

    model = WorldModelConfig(obs_shape=(64, 64, 3), action_dim=6, x_belief=8, x_state=2, y_belief=4, y_state=2,
                             hidden=8, embed_dim=16, conv_width=4)
    agent = DenoisedMDPAgent.create(DenoisedMDPConfig(model=model, actor_hidden=(8,), critic_hidden=(8,)), 0)
    loop = DMCOnlineConfig(task="cheetah-run", variant="distractors", observation="pixels")
    fig = bd.plot_reconstructions(tmp_path / "r.png", agent, loop, 3, "cheetah-run / distractors", "untrained")
    assert (tmp_path / "r.png").stat().st_size > 0
    assert [ax.get_ylabel().split("\n")[0] for ax in fig.axes[::3]] == [
        "observation", "from x and y", "from x alone", "from y alone"]


def test_a_finished_run_is_reused_from_its_record_without_a_checkpoint(tmp_path):
    """A fresh clone has the run directories' records but no checkpoints: the benchmark rebuilds its tables from
    the records instead of training again; a record with other settings is refused, not mixed in."""
    import json

    from platonic_rl.envs.dmc import DMCEnv

    args = bd.Args(tasks=("reacher-easy",), variants=("noiseless",), methods=("dreamer",), env_steps=10_000,
                   out_dir=str(tmp_path))
    env = DMCEnv("reacher-easy", "noiseless", 0)
    config = bd.make_config("dreamer", "reacher-easy", "noiseless", env.observation_space.shape,
                            env.action_space.shape[0], args.preset, args.agent)  # no agent is made: none trains
    history = [dict(env_steps=5000, train_return=3.0), dict(env_steps=10_000, train_return=4.0, eval_return=7.5)]
    record = bd.run_record("reacher-easy", "noiseless", "dreamer", 0, config, bd.loop_config(args, "reacher-easy",
                           "noiseless", 0), history, {"x->agent_state": 0.5}, 1.0)
    record["probe_settings"] = bd.probe_settings(args)
    run_dir = tmp_path / "reacher-easy_noiseless_dreamer_seed0"
    run_dir.mkdir()
    (run_dir / bd.RECORD).write_text(json.dumps(record))
    result = json.loads(json.dumps(bd.run(args)))  # returns without training: nothing to restore
    assert result["runs"] == [json.loads(json.dumps(record))]
    assert result["summary"]["noiseless"]["dreamer"]["mean_return"] == 7.5
    assert not (run_dir / "checkpoints").exists()
    with pytest.raises(ValueError, match=r"other settings[\s\S]*probe_settings.train_episodes: saved 4, now 5"):
        bd.run(bd.Args(**{**vars(args), "probe_train": 5}))  # its probe scores came from 4 episodes
    # A larger budget is no other run: it trains on (from its checkpoint, where there is one).
    loop = bd.loop_config(args, "reacher-easy", "noiseless", 0)
    assert bd.finished_record(run_dir, config, loop, args) is not None
    assert bd.finished_record(run_dir, config, bd.loop_config(bd.Args(**{**vars(args), "env_steps": 20_000}),
                                                              "reacher-easy", "noiseless", 0), args) is None
    # Host-only loop fields change no result: the record is reused whatever they hold; the replay capacity is
    # another experiment.
    host = dataclasses.replace(loop, checkpoint_every=loop.checkpoint_every + 1, updates_per_call=1, resume=False)
    assert bd.finished_record(run_dir, config, host, args) is not None
    with pytest.raises(ValueError, match="loop.buffer_episodes: saved None, now 7"):
        bd.finished_record(run_dir, config, dataclasses.replace(loop, buffer_episodes=7), args)
    (run_dir / bd.RECORD).write_text("{")
    with pytest.raises(ValueError, match="record.json is not valid JSON"):
        bd.run(args)


def finished_reacher_run(tmp_path, checkpoint: int):
    """A finished 10k-env-step Dreamer run on noiseless reacher (record saved, probed at the default settings) with a
    checkpoint directory at ``checkpoint`` env steps; returns (args, the agent's config, the loop's, its history, the
    record, the run directory)."""
    import json

    args = bd.Args(tasks=("reacher-easy",), variants=("noiseless",), methods=("dreamer",), env_steps=10_000,
                   out_dir=str(tmp_path))
    config = bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, args.preset, args.agent)
    loop = bd.loop_config(args, "reacher-easy", "noiseless", 0)
    history = [dict(env_steps=5000, train_return=3.0), dict(env_steps=10_000, train_return=4.0, eval_return=7.5)]
    record = dict(bd.run_record("reacher-easy", "noiseless", "dreamer", 0, config, loop, history,
                                {"x->agent_state": 0.5}, 1.0), probe_settings=bd.probe_settings(args))
    run_dir = tmp_path / "reacher-easy_noiseless_dreamer_seed0"
    (run_dir / "checkpoints" / str(checkpoint)).mkdir(parents=True)
    (run_dir / bd.RECORD).write_text(json.dumps(record))
    return args, config, loop, history, record, run_dir


def test_a_finished_run_with_its_checkpoint_is_probed_again_under_new_probe_settings(tmp_path, monkeypatch):
    """Other probe settings on a finished run: restored from its final checkpoint (nothing trains) and probed again,
    its curves kept and its record rewritten; without that checkpoint the call is refused."""
    import json

    # Stopped short of the budget (its last checkpoint at 5000): cannot be probed again
    args, config, loop, history, record, run_dir = finished_reacher_run(tmp_path, checkpoint=5000)
    more = bd.Args(**{**vars(args), "probe_train": 20, "probe_test": 10})
    with pytest.raises(ValueError, match="probe_settings.train_episodes: saved 4, now 20[\\s\\S]*final checkpoint "
                                         "\\(env steps 10000\\) is not in"):
        bd.finished_record(run_dir, config, loop, more)

    (run_dir / "checkpoints" / "10000").mkdir()
    restored = []
    monkeypatch.setattr(bd.DenoisedMDPAgent, "create", staticmethod(lambda c, seed: ("untrained", seed)))
    monkeypatch.setattr(bd, "train_dmc_online", lambda agent, lp, directory, desc: (
        restored.append((agent, lp.env_steps, Path(directory))) or "trained", history))
    monkeypatch.setattr(bd, "probe", lambda agent, lp, a, seed: {"x->agent_state": 0.9 if agent == "trained" else -1.0,
                                                                 "y->agent_state": float(a.probe_train)})
    monkeypatch.setattr(bd.report, "save_run", lambda out, module, a, result, **kw: result)
    result = bd.run(more)
    assert restored == [(("untrained", 0), 10_000, run_dir)]
    saved = json.loads((run_dir / bd.RECORD).read_text())
    assert saved["probe"] == {"x->agent_state": 0.9, "y->agent_state": 20.0}  # the restored agent's, 20 episodes
    assert saved["probe_settings"] == {"train_episodes": 20, "test_episodes": 10}
    assert saved["eval_return"] == [7.5] and saved["train_return"] == [3.0, 4.0] and saved["seconds"] == 1.0
    assert result["runs"][0]["probe"] == saved["probe"]
    bd.run(more)  # now probed with these settings: reused as it is
    assert len(restored) == 1
    larger = bd.loop_config(bd.Args(**{**vars(more), "env_steps": 20_000}), "reacher-easy", "noiseless", 0)
    assert bd.finished_record(run_dir, config, larger, args) is None  # a larger budget trains on, whatever the probe
    assert bd.finished_record(run_dir, config, loop, args)["probe_settings"] != bd.probe_settings(args)  # to probe
    bd.run(bd.Args(**{**vars(more), "probe_again": True}))  # asked for: probed again all the same
    assert len(restored) == 2
    (run_dir / "checkpoints" / "10000").rmdir()
    with pytest.raises(ValueError, match="cannot probe .*seed0 without training: its final checkpoint"):
        bd.run(bd.Args(**{**vars(more), "probe_again": True}))


def test_a_final_evaluation_is_made_from_the_final_checkpoint_and_reported_instead_of_the_last_periodic_one(
        tmp_path, monkeypatch):
    """--final-eval-episodes on a finished run without that evaluation: restored once from its final checkpoint
    (nothing trains, the probe is not redone), evaluated on the shared seeds, its record rewritten; the table, the
    summary and the plot then report the final evaluation; without the checkpoint the call is refused."""
    import json

    args, _, _, history, record, run_dir = finished_reacher_run(tmp_path, checkpoint=10_000)
    restored, evaluated = [], []
    monkeypatch.setattr(bd.DenoisedMDPAgent, "create", staticmethod(lambda c, seed: ("untrained", seed)))
    monkeypatch.setattr(bd, "train_dmc_online", lambda agent, lp, directory, desc: (
        restored.append(lp.env_steps) or "trained", history))
    monkeypatch.setattr(bd, "probe", lambda *a: pytest.fail("the probe's settings did not change"))
    monkeypatch.setattr(bd, "evaluation_summaries", lambda env, agent, seeds: (
        evaluated.append((agent, list(seeds))) or [dict(episode_return=r, saturated_actions=s) for r, s in zip(
            [0.0, 100.0, 500.0], [0.1, 0.2, 0.6])][:len(evaluated[-1][1])]))
    monkeypatch.setattr(bd.report, "save_run", lambda out, module, a, result, **kw: dict(result, **kw))
    monkeypatch.setattr(bd, "random_actions", lambda lp, episodes: dict(episodes=episodes, mean=1.5, std=0.5))
    final = bd.Args(**{**vars(args), "final_eval_episodes": 3})
    result = bd.run(final)
    first = bd.FINAL_EVAL_SEED
    assert restored == [10_000] and evaluated == [("trained", [first, first + 1, first + 2])]
    saved = json.loads((run_dir / bd.RECORD).read_text())
    assert saved["final_evaluation"] == dict(episodes=3, first_seed=first, returns=[0.0, 100.0, 500.0],
                                             mean=200.0, std=pytest.approx(np.std([0.0, 100.0, 500.0])),
                                             saturated_actions=pytest.approx(0.3))
    assert saved["probe"] == {"x->agent_state": 0.5} and saved["eval_return"] == [7.5]  # the rest kept
    assert result["summary"]["noiseless"]["dreamer"]["mean_return"] == 200.0  # the final evaluation's mean
    assert result["random_actions"] == {"reacher-easy noiseless": dict(episodes=3, mean=1.5, std=0.5)}
    assert "reacher-easy  noiseless     random         1.5    0.5   uniformly random actions" in result["table"]
    without = bd.run(args)
    assert without["summary"]["noiseless"]["dreamer"]["mean_return"] == 7.5  # the periodic one
    assert "random_actions" not in without and "random" not in without["table"].split("seeds\n")[-1]
    bd.run(final)  # evaluated with this size already: reused
    assert len(restored) == 1
    table = bd.format_table(final, bd.summarise([saved], final=True), [saved])
    assert "final evaluation, 3 episodes" in table and "0: 200.0; saturated actions 0.30" in table
    assert "saturated actions: the share of action components within 0.05 of +-1" in table
    older = dict(saved, final_evaluation={k: v for k, v in saved["final_evaluation"].items()
                                          if k != "saturated_actions"})  # recorded before the share was
    assert "saturated" not in bd.format_table(final, bd.summarise([older], final=True), [older])
    ax = bd.plot_returns(tmp_path / "returns.png", final, [saved], result["random_actions"]).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "dreamer: final, 3 episodes (+- s.e.)" in legend and "uniformly random actions" in legend
    with pytest.raises(ValueError, match="seed 0: the record has no final evaluation"):
        bd.final_return(record, final=True)
    both = bd.Args(**{**vars(final), "final_eval_episodes": 2, "probe_train": 5})
    monkeypatch.setattr(bd, "probe", lambda agent, lp, a, seed: {"x->agent_state": float(a.probe_train)})
    bd.run(both)  # the probe and the evaluation redone from one restore
    saved = json.loads((run_dir / bd.RECORD).read_text())
    assert len(restored) == 2 and saved["probe"] == {"x->agent_state": 5.0}
    assert saved["final_evaluation"]["returns"] == [0.0, 100.0]
    bd.run(both)  # the same sizes: reused ...
    assert len(restored) == 2
    bd.run(bd.Args(**{**vars(both), "evaluate_again": True}))  # ... unless asked to evaluate again
    assert len(restored) == 3 and len(evaluated) == 3
    (run_dir / "checkpoints" / "10000").rmdir()
    with pytest.raises(ValueError, match="cannot evaluate .*seed0 without training: its final checkpoint"):
        bd.run(bd.Args(**{**vars(both), "final_eval_episodes": 4}))
    with pytest.raises(ValueError, match="--final-eval-episodes must be >= 0"):
        bd.Args(final_eval_episodes=-1)
    with pytest.raises(ValueError, match="--evaluate-again .* needs --final-eval-episodes >= 1"):
        bd.Args(evaluate_again=True)


def test_random_actions_score_the_final_evaluations_episodes_with_the_random_prefills_actions():
    from platonic_rl.training.world_model import run_episode

    loop = bd.loop_config(bd.Args(), "reacher-easy", "noiseless", 0)
    reference = bd.random_actions(loop, 2)
    returns = [run_episode(loop.make_env(), seed=bd.FINAL_EVAL_SEED + i)["episode_return"] for i in range(2)]
    assert reference == dict(episodes=2, first_seed=bd.FINAL_EVAL_SEED, mean=pytest.approx(np.mean(returns)),
                             std=pytest.approx(np.std(returns)), saturated_actions=pytest.approx(0.05, abs=0.02))


def test_batch_and_imagination_flags_reach_the_configs_and_bad_values_are_rejected(tmp_path):
    args = bd.Args(tasks=("reacher-easy",), batch_size=50, chunk=50, agent=Settings(imagine_starts=2500),
                   out_dir=str(tmp_path))
    loop = bd.loop_config(args, "reacher-easy", "noiseless", 0)
    assert (loop.batch_size, loop.chunk) == (50, 50)
    assert bd.loop_config(bd.Args(updates_per_call=10), "reacher-easy", "noiseless", 0).updates_per_call == 10
    config = bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu", args.agent)
    assert config.imagine_starts == 2500
    default = bd.loop_config(bd.Args(), "reacher-easy", "noiseless", 0)
    assert (default.batch_size, default.chunk) == (presets.DMC_PRESETS["cpu"]["batch_size"], presets.DMC_PRESETS["cpu"]["chunk"])
    assert "batch 50 x 50, imagining from 2500" in bd._budget(args)
    for name in ("batch_size", "chunk"):
        with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} must be >= 1"):
            bd.Args(**{name: 0})
    with pytest.raises(ValueError, match="--imagine-starts must be >= 1"):
        Settings(imagine_starts=0)
    with pytest.raises(ValueError, match="--chunk must be <= 501"):
        bd.Args(chunk=502)
    # --beta replaces Table D.5's beta for Denoised MDP, and the plots' budget line says so
    table = bd.make_config("denoised", "cheetah-run", "distractors", (6,), 2, "cpu")
    chosen = bd.make_config("denoised", "cheetah-run", "distractors", (6,), 2, "cpu", Settings(beta=1.0))
    assert (table.beta, chosen.beta) == (bd.BETAS["cheetah-run"]["distractors"], 1.0)
    assert "beta 1.0" in bd._budget(bd.Args(agent=Settings(beta=1.0))) and "beta" not in bd._budget(bd.Args())
    with pytest.raises(ValueError, match="--beta must be > 0"):
        bd.Args(agent=Settings(beta=0.0))
    # Free nats: --free-nats is Denoised MDP's, --dreamer-free-nats Dreamer's; each reaches its method only
    kw = dict(free_nats=2.0, dreamer_free_nats=0.5)
    assert bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(**kw)).free_nats == 0.5
    assert bd.make_config("denoised", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(**kw)).free_nats == 2.0
    assert bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu").free_nats == 3.0
    assert "Dreamer free nats 0.5" in bd._budget(bd.Args(agent=Settings(dreamer_free_nats=0.5)))
    assert "free nats" not in bd._budget(bd.Args())
    for name in ("free_nats", "dreamer_free_nats"):
        with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} must be >= 0"):
            Settings(**{name: -1.0})
    # --dreamer-alpha weighs Dreamer's KL only; --alpha Denoised MDP's only
    kw = dict(alpha=0.3, dreamer_alpha=0.5)
    assert bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(**kw)).alpha == 0.5
    assert bd.make_config("denoised", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(**kw)).alpha == 0.3
    assert bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(alpha=0.3)).alpha == 1.0
    assert "Dreamer alpha 0.5" in bd._budget(bd.Args(agent=Settings(dreamer_alpha=0.5)))
    assert "Dreamer alpha" not in bd._budget(bd.Args())
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="--dreamer-alpha must be > 0"):
            bd.Args(agent=Settings(dreamer_alpha=bad))
    # --x-size sets x (Dreamer's whole latent) for both methods; y keeps the preset's
    for method in ("denoised", "dreamer"):
        model = bd.make_config(method, "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(x_size=(30, 7))).model
        assert (model.x_belief, model.x_state) == (30, 7)
    cpu = presets.DMC_PRESETS["cpu"]
    sized = bd.make_config("denoised", "reacher-easy", "noiseless", (6,), 2, "cpu", Settings(x_size=(30, 7))).model
    assert (sized.y_belief, sized.y_state) == (cpu["model"]["y_belief"], cpu["model"]["y_state"])
    dreamer = bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu").model
    assert (dreamer.x_belief, dreamer.x_state) == (cpu["dreamer"]["x_belief"], cpu["dreamer"]["x_state"])
    assert "x size 30 + 7" in bd._budget(bd.Args(agent=Settings(x_size=(30, 7))))
    assert "x size" not in bd._budget(bd.Args())
    for bad in ((30, 0), (30,), (30, 7, 2)):
        with pytest.raises(ValueError, match="--x-size takes two sizes >= 1"):
            bd.Args(agent=Settings(x_size=bad))
    # --kl-split is Denoised MDP's alone; a new settings field named like a config field reaches both methods' configs
    split = Settings(kl_split=True)
    assert bd.make_config("denoised", "reacher-easy", "noiseless", (6,), 2, "cpu", split).kl_split
    assert not bd.make_config("dreamer", "reacher-easy", "noiseless", (6,), 2, "cpu", split).kl_split
    assert "KL-x split True" in bd._budget(bd.Args(agent=split))
    extended = dataclasses.make_dataclass("Extended", [("horizon", int, dataclasses.field(default=7))],
                                          bases=(Settings,), frozen=True)
    for method in ("denoised", "dreamer"):
        assert bd.make_config(method, "reacher-easy", "noiseless", (6,), 2, "cpu", extended()).horizon == 7


def test_seconds_per_10k_counts_the_training_rows_after_the_prefill():
    history = [dict(env_steps=1000, row_seconds=100.0), dict(env_steps=2000, row_seconds=3.0),
               dict(env_steps=3000, row_seconds=5.0), dict(env_steps=4000, row_seconds=50.0, eval_return=1.0)]
    # The prefill row, the first training row (it compiles) and the evaluation row are left out.
    assert bd.seconds_per_10k(history, prefill_steps=1000) == pytest.approx(1e4 * 5.0 / 1000)
    assert bd.seconds_per_10k(history[:1] + history[3:], prefill_steps=1000) is None


def test_learning_signals_are_the_update_metrics_averaged_per_window_of_env_steps():
    history = [dict(env_steps=5000, episode=5, train_return=1.0),  # prefill: no updates
               dict(env_steps=6000, train_return=2.0, kl_x=3.0, reward_nll=0.5, row_seconds=9.0),
               dict(env_steps=10_000, train_return=2.0, kl_x=4.0, reward_nll=0.1, eval_return=7.0),
               dict(env_steps=11_000, train_return=2.0, kl_x=2.0, kl_y=1.0),
               dict(env_steps=30_000, train_return=2.0, kl_x=6.0, kl_y=3.0)]
    signals = bd.learning_signals(history, every=10_000)
    assert signals == {"env_steps": [10_000, 20_000, 30_000], "kl_x": [3.5, 2.0, 6.0], "kl_y": [None, 1.0, 3.0],
                       "reward_nll": [pytest.approx(0.3), None, None]}
    assert bd.learning_signals(history[:1]) == {"env_steps": []}
    with pytest.raises(ValueError, match="every must be >= 1"):
        bd.learning_signals(history, every=0)


def test_alpha_follows_the_observation_size_for_denoised_mdp_only():
    """The thesis' rule (Section 5.3): alpha proportional to the observation's size, 1 at DMC's 64x64x3 pixels."""
    states = bd.make_config("denoised", "cheetah-run", "distractors", (34,), 6, "cpu")
    pixels = bd.make_config("denoised", "cheetah-run", "distractors", (64, 64, 3), 6, "cpu")
    assert states.alpha == pytest.approx(34 / 12288) and pixels.alpha == 1.0
    assert bd.make_config("dreamer", "cheetah-run", "distractors", (34,), 6, "cpu").alpha == 1.0
    assert bd.make_config("denoised", "cheetah-run", "distractors", (34,), 6, "cpu", Settings(alpha=0.5)).alpha == 0.5
    assert "alpha 0.5" in bd._budget(bd.Args(agent=Settings(alpha=0.5))) and "alpha" not in bd._budget(bd.Args())
    with pytest.raises(ValueError, match="--alpha must be > 0"):
        bd.Args(agent=Settings(alpha=0.0))


def test_distractor_flags_reach_the_env_and_the_budget_line():
    args = bd.Args(tasks=("reacher-easy",), variants=("distractors",), num_twins=2)
    loop = bd.loop_config(args, "reacher-easy", "distractors", 0)
    assert (loop.distractor, loop.num_twins) == ("twin", 2)
    assert loop.make_env().observation_space.shape == (18,)  # 6 + two twins of 6
    assert "distractors twin x2" in bd._budget(args)
    old = bd.loop_config(bd.Args(distractor="signals"), "reacher-easy", "distractors", 0)
    assert old.make_env().observation_space.shape == (14,)  # 6 + the 8 smooth signals
    assert "distractors signals" in bd._budget(bd.Args(distractor="signals"))
    with pytest.raises(ValueError, match="--num-twins is for --distractor twin"):
        bd.Args(distractor="signals", num_twins=2)
    with pytest.raises(ValueError, match="--num_twins must be >= 1|--num-twins must be >= 1"):
        bd.Args(num_twins=0)


def test_a_record_of_an_earlier_run_format_is_refused_not_reused(tmp_path):
    """A finished run's record is reused only beside a run directory of today's format: one written before formats
    were recorded may lack fields whose absence meant other behaviour than today's defaults (CHANGELOG.md)."""
    import json

    args = bd.Args(tasks=("reacher-easy",), variants=("noiseless",), methods=("dreamer",), env_steps=10_000,
                   out_dir=str(tmp_path))
    loop = bd.loop_config(args, "reacher-easy", "noiseless", 0)
    env = loop.make_env()
    config = bd.make_config("dreamer", "reacher-easy", "noiseless", env.observation_space.shape,
                            env.action_space.shape[0], args.preset, args.agent)
    record = bd.run_record("reacher-easy", "noiseless", "dreamer", 0, config, loop,
                           [dict(env_steps=10_000, train_return=1.0, eval_return=2.0)], {}, 1.0)
    record["probe_settings"] = bd.probe_settings(args)
    run_dir = tmp_path / "reacher-easy_noiseless_dreamer_seed0"
    run_dir.mkdir()
    (run_dir / bd.RECORD).write_text(json.dumps(record))
    (run_dir / "config.json").write_text(json.dumps(dict(format=RUN_FORMAT, command="", settings={})))
    assert bd.finished_record(run_dir, config, loop, args) is not None
    (run_dir / "config.json").write_text(json.dumps(dict(command="", settings={})))  # format 1
    with pytest.raises(ValueError, match="run format 1.*--overwrite"):
        bd.finished_record(run_dir, config, loop, args)
