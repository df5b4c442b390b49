"""Bad input gets a clear error naming the argument and what was expected (not a deep traceback, NaN or
silence). Tiny networks; most checks fail before anything is compiled."""
import dataclasses
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tyro

from platonic_rl.agents import qrl
from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.ddpg_her import DDPGHERAgent, DDPGHERConfig
from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl import QRLAgent, QRLConfig
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402

OBS, ACT, B = 3, 2, 4
# The Denoised MDP agent is the recorded "denoised_imagine" case's (tests/fixtures/update_fixtures.py), on its
# batches' shapes: 3 sequences of 4 steps of 5-d observations. Its create compiles once per suite.
D_OBS, D_B, T = 5, 3, 4
CONFIGS = {
    "qrl": QRLConfig(obs_dim=OBS, encoder_hidden=(8,), latent_dim=4, projector_hidden=(8,), iqe_components=2,
                     iqe_dim_per_component=4, dynamics_hidden=(8,), cosine_decay_steps=None,
                     general_goal=(0.0,) * OBS),
    "qrl_continuous": QRLContinuousConfig(obs_dim=OBS, action_dim=ACT, encoder_hidden=(8,), latent_dim=4,
                                          projector_hidden=(8,), iqe_components=2, iqe_dim_per_component=4,
                                          dynamics_hidden=(8,), actor_hidden=(8,)),
    "crl": CRLConfig(obs_dim=OBS, action_dim=ACT, hidden=(8,), repr_dim=4, actor_hidden=(8,)),
    "gcbc": GCBCConfig(obs_dim=OBS, action_dim=ACT, hidden=(8,)),
    "ddpg_her": DDPGHERConfig(obs_dim=OBS, action_dim=ACT, goal_dims=(0, 1), hidden=(8,), latent_dim=8),
    "denoised": update_fixtures.world_model_config(),
}
MODEL = CONFIGS["denoised"].model
assert MODEL.obs_shape == (D_OBS,) and MODEL.action_dim == ACT
CLASSES = {"qrl": QRLAgent, "qrl_continuous": QRLContinuousAgent, "crl": CRLAgent, "gcbc": GCBCAgent,
           "ddpg_her": DDPGHERAgent, "denoised": DenoisedMDPAgent}
_agents = {}


def agent(name):
    if name not in _agents:
        _agents[name] = CLASSES[name].create(CONFIGS[name], 0)
    return _agents[name]


def batch(name, b=None):
    """A valid batch of ``b`` rows for agent ``name`` (NumPy arrays; by default ``B`` rows, ``D_B`` sequences)."""
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    if name == "denoised":
        b = D_B if b is None else b
        return dict(observations=f(b, T, D_OBS), prev_actions=f(b, T, ACT), rewards=f(b, T))
    b = B if b is None else b
    out = dict(observations=f(b, OBS), next_observations=f(b, OBS), goals=f(b, OBS),
               actions=np.clip(f(b, ACT), -0.9, 0.9), rewards=-np.ones(b, np.float32))
    if name == "qrl":
        out["actions"] = rng.integers(-1, 3, b).astype(np.int32)
    return out


# 1 ------------------------------------------------------------------------------------------------------
def test_qrl_action_ids_out_of_range_are_rejected():
    config = CONFIGS["qrl"]
    bad = dict(batch("qrl"), actions=np.array([0, 1, 3, -1], np.int32))  # 3 == num_actions: not an action
    with pytest.raises(ValueError, match=r"batch\['actions'\] must be action ids in \[-1, num_actions=3\)"):
        agent("qrl").update(bad)  # eager: the actions are concrete, so their values are checked
    with pytest.raises(ValueError, match=r"batch\['actions'\].*\[-1, num_actions=3\).*e\.g\. -2"):
        qrl.validate_batch(dict(batch("qrl"), actions=np.array([0, -2, 1, 2], np.int32)), config)
    # Under jit the values cannot be read: the whole dataset is checked on the host before training.
    data = dict(batch("qrl", 10), actions=np.r_[np.arange(-1, 3), 7, np.zeros(5)].astype(np.int64))
    with pytest.raises(ValueError, match=r"data\['actions'\] must be action ids in \[-1, num_actions=3\)"):
        qrl.validate_dataset(data, config)
    with pytest.raises(ValueError, match=r"data\['actions'\]"):
        agent("qrl").validate_dataset(data)
    with pytest.raises(ValueError, match=r"data is missing keys \['rewards'\]"):
        qrl.validate_dataset({k: v for k, v in data.items() if k != "rewards"}, config)
    qrl.validate_dataset(dict(data, actions=np.r_[np.arange(-1, 3), np.zeros(6)].astype(np.int64)), config)
    qrl.validate_batch(batch("qrl"), config)  # every id in [-1, 3) is fine


# 2 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CLASSES))
def test_empty_batch_is_rejected_even_under_jit(name):
    empty = batch(name, b=0)
    key = "rewards" if name == "denoised" else "observations"
    for update in (CLASSES[name].update, jax.jit(CLASSES[name].update)):  # shapes are static: traced checks fire
        with pytest.raises(ValueError, match=rf"batch\['{key}'\].*(batch size B = 0|B >= 1)"):
            update(agent(name), empty)


# 3 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CLASSES))
def test_batches_of_python_lists_are_converted(name):
    lists = {k: v.tolist() for k, v in batch(name, b=2).items()}
    arrays = {k: np.asarray(v) for k, v in lists.items()}
    # Traced (no compile): lists work like arrays in update, with the same output shapes.
    out_lists = jax.eval_shape(CLASSES[name].update, agent(name), lists)
    out_arrays = jax.eval_shape(CLASSES[name].update, agent(name), arrays)
    assert jax.tree.structure(out_lists) == jax.tree.structure(out_arrays)
    assert jax.tree.map(lambda x: x.shape, out_lists) == jax.tree.map(lambda x: x.shape, out_arrays)
    with pytest.raises(TypeError, match="batch must be a dict of arrays"):
        CLASSES[name].update(agent(name), list(lists.items()))
    ragged = dict(lists, observations=[[0.0] * (D_OBS if name == "denoised" else OBS), [0.0]])
    with pytest.raises(TypeError, match=r"batch\['observations'\] must be an array"):
        CLASSES[name].update(agent(name), ragged)


def test_list_batch_gives_the_same_update_as_arrays():
    lists = {k: v.tolist() for k, v in batch("gcbc").items()}
    new_lists, metrics_lists = agent("gcbc").update(lists)
    new_arrays, metrics_arrays = agent("gcbc").update({k: np.asarray(v, np.float32) for k, v in lists.items()})
    for a, b in zip(jax.tree.leaves((new_lists, metrics_lists)), jax.tree.leaves((new_arrays, metrics_arrays))):
        np.testing.assert_array_equal(a, b)


# 4 ------------------------------------------------------------------------------------------------------
def test_denoised_act_latent_batch_must_match_observations():
    a = agent("denoised")
    obs, prev = np.zeros((3, D_OBS), np.float32), np.zeros((3, ACT), np.float32)
    with pytest.raises(ValueError, match=r"latent batch size must match observations.*\(2, 8\).*\(3, 5\)"):
        a.act(a.initial_latent(2), obs, prev)
    with pytest.raises(ValueError, match=r"latent must be a dict with keys"):
        a.act({"x": jnp.zeros((3, 2))}, obs, prev)
    with pytest.raises(ValueError, match=r"prev_actions \[N, 2\], got \(3, 5\) and \(2, 2\)"):
        a.act(a.initial_latent(3), obs, prev[:2])


# 5 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["qrl", "qrl_continuous", "crl", "gcbc", "ddpg_her", "denoised"])
def test_act_accepts_an_int_seed_like_a_key(name):
    a = agent(name)
    obs = np.random.default_rng(1).normal(size=(2, D_OBS if name == "denoised" else OBS)).astype(np.float32)
    if name == "denoised":
        act = lambda rng: a.act(a.initial_latent(2), obs, np.zeros((2, ACT), np.float32), rng)[0]  # noqa: E731
    else:
        act = lambda rng: a.act(obs, obs[::-1], rng)  # noqa: E731
    np.testing.assert_array_equal(act(0), act(jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(act(np.int32(5)), act(jax.random.key(5)))  # typed keys work too


# 6 ------------------------------------------------------------------------------------------------------
def _fields(config, pattern):
    return [f.name for f in dataclasses.fields(config) if pattern(f.name)]


@pytest.mark.parametrize("config", list(CONFIGS.values()) + [MODEL], ids=list(CONFIGS) + ["world_model"])
def test_configs_reject_zero_widths_and_bad_learning_rates(config):
    owner = type(config).__name__
    hidden = _fields(config, lambda n: n == "hidden" and isinstance(getattr(config, n), tuple) or n.endswith("_hidden"))
    rates = _fields(config, lambda n: "learning_rate" in n)
    assert hidden and (rates or owner == "WorldModelConfig")
    for name in hidden:
        for widths in ((0,), (8, 0), (-3,)):
            with pytest.raises(ValueError, match=rf"{owner}\.{name} must hold layer widths >= 1"):
                dataclasses.replace(config, **{name: widths})
    for name in rates:
        for lr in (0.0, -1e-3, math.nan, math.inf):
            with pytest.raises(ValueError, match=rf"{owner}\.{name} must be a finite number > 0"):
                dataclasses.replace(config, **{name: lr})


def test_zero_width_from_the_command_line_is_a_clear_error(capsys):
    @dataclasses.dataclass(frozen=True)
    class Cli:
        agent: QRLConfig = QRLConfig()

    with pytest.raises(SystemExit):
        tyro.cli(Cli, args=["--agent.encoder-hidden", "0"])
    assert "QRLConfig.encoder_hidden must hold layer widths >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="WorldModelConfig.conv_width must be >= 1"):
        dataclasses.replace(MODEL, conv_width=0)


# 7 ------------------------------------------------------------------------------------------------------
def test_fetch_cli_rejects_empty_agents_seeds_and_a_budget_below_the_prefill(capsys, tmp_path):
    from platonic_rl.training.goal_online import OnlineConfig, train_online
    from platonic_rl.benchmarks import fetch as bf

    with pytest.raises(ValueError, match="--agents must name at least one agent"):
        bf.Args(agents=())
    with pytest.raises(ValueError, match="--seeds must list at least one seed"):
        bf.Args(seeds=())
    with pytest.raises(ValueError, match="--env-steps must be greater than the 10000 env steps of random prefill"):
        bf.Args(env_steps=10_000)
    with pytest.raises(ValueError, match="--batch-size must be >= 1"):
        bf.Args(batch_size=0)
    with pytest.raises(ValueError, match="--env-steps must be the 10000 env steps of random prefill plus whole "
                                         "cycles of 500"):
        bf.Args(env_steps=10_001)
    bf.Args(env_steps=10_500)
    bf.Args(env_steps=100, from_logs=True)  # reports of logged runs do not train
    with pytest.raises(SystemExit):
        tyro.cli(bf.Args, args=["--agents"])
    assert "--agents must name at least one agent" in capsys.readouterr().err
    # Every user of the online loop: checked before any env is made or episode collected.
    small = OnlineConfig(env_steps=1_000, prefill_episodes=20, rollouts_per_cycle=10)
    assert small.prefill_env_steps == 1_000 and OnlineConfig(prefill_episodes=21).prefill_env_steps == 1_500
    with pytest.raises(ValueError, match=r"OnlineConfig.env_steps=1000 must be greater than the random prefill of "
                                         r"1000 env steps"):
        train_online(None, small, tmp_path)
    # A budget that is not the prefill plus whole cycles would run its last cycle past it (4000 ran 6000 env steps).
    with pytest.raises(ValueError, match=r"OnlineConfig.env_steps=4100 is not the random prefill \(1000 env steps\) "
                                         r"plus a whole number of cycles of 500 env steps.*use env_steps=4000 or 4500"):
        train_online(None, dataclasses.replace(small, env_steps=4_100), tmp_path)
    assert not any(tmp_path.iterdir())


# 8 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tasks", "variants", "methods", "seeds"])
def test_dmc_cli_rejects_empty_lists(name):
    pytest.importorskip("dm_control")
    from platonic_rl.benchmarks import dmc as bd

    with pytest.raises(ValueError, match=f"--{name} must list at least one value"):
        bd.Args(**{name: ()})


# 9 ------------------------------------------------------------------------------------------------------
def test_mountaincar_steps_must_be_positive_and_fit_log_every(monkeypatch, tmp_path):
    from platonic_rl.benchmarks import mountaincar as bench
    from platonic_rl.training.offline import TrainConfig

    for steps in (0, -100):
        with pytest.raises(ValueError, match="--steps must be >= 1"):
            bench.Args(steps=steps)
    with pytest.raises(ValueError, match="--steps must be at most 500 or a multiple of 500"):
        bench.Args(steps=1_200)
    with pytest.raises(ValueError, match="--steps must be at most 1000 or a multiple of 1000"):
        bench.Args(scale="paper", steps=1_500)
    with pytest.raises(SystemExit):
        tyro.cli(bench.Args, args=["--steps", "0"])
    # Steps below the preset's log_every train as one chunk: run() gets as far as the dataset with a valid
    # TrainConfig (log_every = steps; checkpoints at the end), without training anything.
    made = []
    post_init = TrainConfig.__post_init__
    monkeypatch.setattr(TrainConfig, "__post_init__", lambda self: (post_init(self), made.append(self))[0])

    class Stop(Exception):
        pass

    def stop(seed):
        raise Stop

    monkeypatch.setattr(bench.mc, "generate_dataset", stop)
    for steps, log_every, checkpoint_every in ((200, 200, 5_000), (300, 300, 300), (1_000, 500, 5_000)):
        with pytest.raises(Stop):
            bench.run(bench.Args(steps=steps, out_dir=str(tmp_path)))
        assert (made[-1].steps, made[-1].log_every, made[-1].checkpoint_every) == (steps, log_every, checkpoint_every)


def test_qrl_config_for_another_environment_says_to_unset_mountaincars_general_goal():
    from platonic_rl.agents.qrl import QRLConfig

    with pytest.raises(ValueError, match=r"MountainCar's top-of-hill goal.*general_goal=None and p_general_goal=0\.0"):
        QRLConfig(obs_dim=4)
    assert QRLConfig(obs_dim=4, general_goal=None, p_general_goal=0.0).general_goal is None


# 10 -----------------------------------------------------------------------------------------------------
def walks(n=300):
    """An offline dataset of the continuous goal-conditioned agents (2-d states and actions, goals)."""
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    return dict(observations=obs, actions=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                next_observations=obs + 0.01, rewards=-np.ones(n, np.float32), goals=obs[::-1].copy())


@pytest.mark.parametrize("name", ["gcbc", "crl", "qrl_continuous", "ddpg_her"])
def test_every_agent_checks_the_whole_dataset_before_training(name, tmp_path):
    # One NaN row among 300, never sampled in a short run, used to go unnoticed (or to end a long run as a
    # NonFiniteError naming an update): it is found before anything trains, naming the key and the row.
    from platonic_rl import agents
    from platonic_rl.training.offline import TrainConfig, load_dataset, train_offline

    small = dict(gcbc=dict(hidden=(8,)), crl=dict(hidden=(8,), repr_dim=4, actor_hidden=(8,)),
                 qrl_continuous=dict(encoder_hidden=(8,), latent_dim=8, projector_hidden=(8,), iqe_components=2,
                                     iqe_dim_per_component=4, dynamics_hidden=(8,), actor_hidden=(8,)),
                 ddpg_her=dict(hidden=(8,), goal_dims=(0, 1)))[name]
    agent = agents.make(name, obs_dim=2, action_dim=2, preset="offline" if name == "qrl_continuous" else None, **small)
    config = TrainConfig(steps=10, batch_size=4, log_every=10, progress=False)
    data = walks()
    data["goals"][217, 1] = np.nan
    with pytest.raises(ValueError, match=r"data\['goals'\] row 217 holds a non-finite value \(NaN or infinity\): "
                                         r"data\['goals'\]\[217, 1\] = nan \(1 of 300 rows are bad\)"):
        train_offline(agent, data, config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before any run directory
    data = walks()
    data["actions"][[5, 9], 0] = [1.5, -2.0]
    with pytest.raises(ValueError, match=r"data\['actions'\] row 5 is outside \[-1, 1\].*= 1\.5 \(2 of 300 rows"):
        train_offline(agent, data, config)
    data = walks()
    data["rewards"][299] = np.inf
    np.savez(tmp_path / "walks.npz", **data)
    with pytest.raises(ValueError, match=r"data\['rewards'\] row 299 holds a non-finite value.*\[299\] = inf"):
        load_dataset(tmp_path / "walks.npz")  # the loader checks too


def test_discrete_action_ids_below_minus_one_are_named():
    from platonic_rl.training.offline import check_values

    check_values(dict(actions=np.array([0, 2, -1])))
    with pytest.raises(ValueError, match=r"data\['actions'\] row 1 is below -1.*= -3 \(1 of 3 rows"):
        check_values(dict(actions=np.array([0, -3, 1])))


def test_registry_presets_are_named_and_unknown_ones_refused():
    from platonic_rl import agents

    offline = agents.make_config("qrl_continuous", preset="offline", obs_dim=3, action_dim=2, bc_weight=0.1)
    assert offline.actor_distance_scale == "batch_mean" and offline.phi_offset == 500.0 and not offline.adaptive_entropy
    assert offline.bc_weight == 0.1 and offline.obs_dim == 3  # the caller's fields override the preset's
    assert agents.make_config("qrl_continuous", preset="online") == agents.make_config("qrl_continuous")
    with pytest.raises(KeyError, match=r"agent 'qrl_continuous' has no preset 'ofline'; its presets: \['offline', "
                                       r"'online'\]"):
        agents.make("qrl_continuous", preset="ofline", obs_dim=3, action_dim=2)
    with pytest.raises(KeyError, match="agent 'gcbc' has no preset 'offline'; its presets: none"):
        agents.make("gcbc", preset="offline", obs_dim=3, action_dim=2)


def test_qrl_trained_offline_with_the_online_objective_is_refused_naming_the_offline_preset(tmp_path):
    """A QRL continuous agent built without a preset has the online (Fetch) objective, which fails offline: the
    offline loop stops before anything trains (lone or stacked seeds, no run directory made) and names
    preset="offline"; the preset, a changed objective field, or allow_online_objective=True train."""
    from platonic_rl import agents
    from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, uses_online_objective
    from platonic_rl.agents.seeds import SeedStack
    from platonic_rl.training.offline import TrainConfig, train_offline

    small = dict(obs_dim=2, action_dim=2, encoder_hidden=(8,), latent_dim=8, projector_hidden=(8,), iqe_components=2,
                 iqe_dim_per_component=4, dynamics_hidden=(8,), actor_hidden=(8,))
    config = TrainConfig(steps=2, batch_size=4, log_every=2, progress=False)
    online = agents.make_config("qrl_continuous", **small)
    assert uses_online_objective(online) and uses_online_objective(agents.make_config("qrl_continuous", "online", **small))
    for agent in (QRLContinuousAgent.create(online, 0), SeedStack.create(QRLContinuousAgent, online, (0, 1))):
        with pytest.raises(ValueError, match=r'online objective .* preset="offline"'):
            train_offline(agent, walks(), config, run_dir=tmp_path / "refused")
        assert not (tmp_path / "refused").exists()
    offline = agents.make_config("qrl_continuous", "offline", **small)
    assert not uses_online_objective(offline)
    assert not uses_online_objective(dataclasses.replace(online, bc_weight=0.05))
    for ok in (dict(agent=QRLContinuousAgent.create(offline, 0)),
               dict(agent=QRLContinuousAgent.create(online, 0), allow_online_objective=True)):
        assert len(train_offline(data=walks(), config=config, **ok)[1]) == 1
