"""The online loop on FetchReach at toy size: runs every agent, logs, checkpoints and resumes exactly."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
from platonic_rl.agents.crl import CRLAgent, CRLConfig  # noqa: E402
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig  # noqa: E402
from platonic_rl.training.goal_online import OnlineConfig, train_cycle, train_online  # noqa: E402
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig  # noqa: E402
from platonic_rl.envs import fetch  # noqa: E402
from platonic_rl.envs.replay import EpisodeBuffer  # noqa: E402

TOY = OnlineConfig(task="reach", env_steps=400, prefill_episodes=4, rollouts_per_cycle=2, updates_per_cycle=3,
                   batch_size=16, eval_every=200, eval_episodes=2, checkpoint_every=1, buffer_episodes=16)
QRL_TINY = QRLContinuousConfig(obs_dim=10, action_dim=4, encoder_hidden=(16,), latent_dim=8, projector_hidden=(16,),
                               iqe_components=2, iqe_dim_per_component=8, dynamics_hidden=(16,), actor_hidden=(16,))


def test_qrl_runs_logs_and_resumes_exactly(tmp_path):
    budget_sized = dataclasses.replace(TOY, buffer_episodes=None)  # the replay capacity follows env_steps
    agent = QRLContinuousAgent.create(QRL_TINY, 0)
    full, history = train_online(agent, budget_sized, tmp_path / "full")
    assert history[-1]["env_steps"] == 400 and "eval_success" in history[-1]
    assert (tmp_path / "full" / "metrics.csv").exists()
    # Stop after 300 env steps, then resume with the budget raised to 400 (its buffer grows from 12 to 14
    # episodes): identical to the uninterrupted run.
    short = dataclasses.replace(budget_sized, env_steps=300)
    assert short.episode_capacity < budget_sized.episode_capacity
    train_online(agent, short, tmp_path / "split")
    resumed, resumed_history = train_online(agent, budget_sized, tmp_path / "split")
    for a, b in zip(jax.tree.leaves(full.actor_params), jax.tree.leaves(resumed.actor_params)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert [r["env_steps"] for r in resumed_history] == [r["env_steps"] for r in history]
    assert all(r["cycle_seconds"] > 0 for r in resumed_history)  # both invocations' cycles are timed
    logged = [json.loads(line)["env_steps"]
              for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [r["env_steps"] for r in history]  # nothing logged twice across the resume
    with pytest.raises(ValueError, match="does not fit this config's capacity of 4 episodes"):
        train_online(agent, dataclasses.replace(TOY, buffer_episodes=4), tmp_path / "split")


def test_splitting_a_cycle_into_calls_gives_the_same_updates():
    # 3 steps in one scanned call vs one call per step: same batches, same parameters, same mean metrics. The
    # buffer, goal mask and step count are those of the resume test's run, so the scanned call is compiled once.
    rng = np.random.default_rng(0)
    capacity = dataclasses.replace(TOY, buffer_episodes=None).episode_capacity
    buffer = EpisodeBuffer.create(capacity, 50, 10, 4).add(rng.normal(size=(8, 51, 10)),
                                                          rng.uniform(-1, 1, (8, 50, 4)))
    goal_mask = jnp.asarray(fetch.state_to_goal("reach", np.ones(10, np.float32)))
    agent, key = QRLContinuousAgent.create(QRL_TINY, 0), jax.random.PRNGKey(3)
    runs = [train_cycle(agent, buffer, key, goal_mask, dataclasses.replace(TOY, updates_per_call=n))
            for n in (None, 1)]
    for other in runs[1:]:
        for a, b in zip(jax.tree.leaves(runs[0][0].critic_params), jax.tree.leaves(other[0].critic_params)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for name, value in runs[0][1].items():
            np.testing.assert_allclose(value, other[1][name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert not np.allclose(jax.tree.leaves(agent.critic_params)[0], jax.tree.leaves(runs[0][0].critic_params)[0])
    with pytest.raises(ValueError, match="updates_per_call must be a positive divisor"):
        OnlineConfig(updates_per_cycle=125, updates_per_call=2)


@pytest.mark.slow  # ~6 s; Contrastive RL trains in this loop in docs/environments.md's own-env example, which runs fast
def test_contrastive_rl_trains_deterministically():  # (GCBC runs in the episode-seed test below)
    agent = CRLAgent.create(CRLConfig(hidden=(16,), repr_dim=4, actor_hidden=(8,)), 0)
    (trained, history), (again, _) = [train_online(agent, dataclasses.replace(TOY, env_steps=300)) for _ in range(2)]
    assert np.isfinite([v for r in history for v in r.values()]).all()
    for before, after, repeated in zip(*(jax.tree.leaves((a.critic_params, a.actor_params))
                                         for a in (agent, trained, again))):
        assert not np.allclose(before, after)  # every parameter moved
        np.testing.assert_array_equal(after, repeated)  # and the same run gives the same agent


@pytest.mark.slow  # ~45 s: renders, compiles a conv update; the pieces have fast tests of their own
def test_image_observations_run_end_to_end(tmp_path):
    from platonic_rl.agents.qrl_continuous import IMAGE_DEFAULTS

    config = dataclasses.replace(QRL_TINY, **{**IMAGE_DEFAULTS, "encoder_hidden": (8,)})
    loop = dataclasses.replace(TOY, obs="image", env_steps=200, prefill_episodes=2, updates_per_cycle=2,
                               batch_size=4, eval_episodes=2)
    agent, history = train_online(QRLContinuousAgent.create(config, 0), loop, tmp_path)
    # Seeded values (CPU, the pinned jax): half the exploration episodes reached their goal, no evaluation episode.
    last = history[-1]
    assert (last["env_steps"], last["explore_success"], last["eval_success"]) == (200, 0.5, 0.0)
    with pytest.raises(ValueError, match="obs"):
        OnlineConfig(obs="pixels")


def test_every_episode_of_a_run_has_its_own_seed(monkeypatch):
    # Seeding a vector env with one int gives sub-env j the seed s + j, so batches seeded s and s + 1 replay nine
    # of ten episodes. Every prefill, exploration and evaluation episode of a run must reset with its own seed.
    from platonic_rl.envs.goal_env import GoalEnvAdapter

    seen = []
    rollout = GoalEnvAdapter.rollout

    def spy(self, policy, seed, renderer=None):
        seen.append(list(seed))
        return rollout(self, policy, seed, renderer)

    monkeypatch.setattr(GoalEnvAdapter, "rollout", spy)
    # (The batches of one evaluation are distinct episodes too: the next test, 30 episodes on 10 envs.)
    loop = dataclasses.replace(TOY, env_steps=400, eval_every=100, eval_episodes=2)
    _, history = train_online(GCBCAgent.create(GCBCConfig(hidden=(16,)), 0), loop)
    assert np.isfinite([v for r in history for v in r.values()]).all()  # GCBC runs
    seeds = [s for batch in seen for s in batch]
    # 2 prefill batches of 2 episodes, then 2 cycles of: an exploration batch of 2, an evaluation of 2 episodes
    assert [len(batch) for batch in seen] == [2, 2] + [2, 2] * 2
    assert len(set(seeds)) == len(seeds)


def test_the_episodes_of_one_evaluation_are_all_different():
    # FetchReach, 12 evaluation episodes on 4 envs (three batches): with one int seed per batch, batch b + 1 replayed
    # three of batch b's four episodes (on 10 envs, 50 episodes gave only 14 distinct goals).
    from platonic_rl.training.goal_online import evaluate
    from platonic_rl.training.schedule import eval_seed

    env = fetch.adapter(fetch.make_vector_env("reach", 4), "reach")
    starts, calls = [], [0]

    def still(observations, goals):  # records each episode's first state and goal state
        if calls[0] % fetch.EPISODE_LENGTH == 0:
            starts.append(np.concatenate([observations, goals], axis=1))
        calls[0] += 1
        return np.zeros((len(observations), 4), np.float32)

    evaluate(still, env, 12, seed=eval_seed(2000))
    with pytest.raises(ValueError, match="4 seeds"):
        env.rollout(still, seed=[1, 2, 3])
    env.close()
    first = np.concatenate(starts)
    assert first.shape == (12, 20) and len(np.unique(first[:, 10:], axis=0)) == 12  # 12 distinct goals


def test_evaluation_policies_act_on_the_agents_episodes(tmp_path):
    from platonic_rl.agents.contract import host_policy
    from platonic_rl.agents.qrl_policies import LatentLookahead, PolicySpec
    from platonic_rl.training.goal_online import evaluate, make_goal_env
    from platonic_rl.training.schedule import eval_seed

    loop = dataclasses.replace(TOY, env_steps=500, eval_policies_after=400)  # evaluations at 400 and 500
    lookahead = PolicySpec.of("lookahead", hold_steps=2, grid_size=2)

    class OverStates:  # a build that plans over replay states (as a waypoint PolicySpec): it records what it got
        dataset_states_wanted, received = 7, []

        def __call__(self, agent, states):
            self.received.append(np.asarray(states))
            return agent

    over_states = OverStates()
    policies = {"actor": lambda agent: agent, "lookahead": lookahead, "states": over_states}
    agent, history = train_online(QRLContinuousAgent.create(QRL_TINY, 0), loop, tmp_path, eval_policies=policies)
    evaluated = [r for r in history if "eval_success" in r]
    assert [r["env_steps"] for r in evaluated] == [400, 500]
    assert not any(k.startswith("eval_success_") or k == "eval_policies_seconds" for k in evaluated[0])  # not yet due
    evaluated = evaluated[1:]
    assert all(r["eval_success_actor"] == r["eval_success"] == r["eval_success_states"]
               for r in evaluated)  # the same episodes
    # Each evaluation built it from 7 replay states (observations: not all zeros, as an empty buffer's would be).
    assert len(over_states.received) == len(evaluated)
    assert all(s.shape == (7, QRL_TINY.obs_dim) and np.abs(s).sum(1).min() > 0 for s in over_states.received)
    assert all(0 < r["eval_policies_seconds"] < r["cycle_seconds"] for r in evaluated)
    # The last evaluation is the trained agent's lookahead on the evaluation's episodes.
    env = make_goal_env("reach", 2)
    try:
        expected = evaluate(host_policy(LatentLookahead(agent, hold_steps=2, grid_size=2)), env, 2,
                            seed=eval_seed(history[-1]["env_steps"]))
    finally:
        env.close()
    assert evaluated[-1]["eval_success_lookahead"] == expected
    recorded = json.loads((tmp_path / "config.json").read_text())["settings"]["eval_policies"]
    assert recorded == {"actor": "test_evaluation_policies_act_on_the_agents_episodes.<locals>.<lambda>",
                        "lookahead": {"policy": "lookahead", "grid_size": 2, "hold_steps": 2},
                        "states": "OverStates"}
    with pytest.raises(ValueError, match="eval_success_<name>"):
        train_online(agent, loop, eval_policies={"a/b": lookahead})
    with pytest.raises(ValueError, match="eval_policies_after must be >= 0"):
        dataclasses.replace(loop, eval_policies_after=-1)
