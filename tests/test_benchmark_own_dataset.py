"""The own-dataset settings benchmark: its data, its agents' settings and its arguments (the training runs are the
offline loop's, tested in test_train.py)."""
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
from platonic_rl.benchmarks import own_dataset  # noqa: E402


def test_generated_episodes_are_stored_flat_with_their_ends():
    data = own_dataset.generate(episodes=10, steps=6, noise=0.5, seed=0)
    assert data["observations"].shape == data["next_observations"].shape == (60, 4)
    assert data["actions"].shape == (60, 2) and np.all(np.abs(data["actions"]) <= 1)
    assert np.flatnonzero(data["segment_end"]).tolist() == list(range(5, 60, 6))
    within = ~data["segment_end"][:-1]  # inside an episode, each step starts where the previous one ended
    np.testing.assert_array_equal(data["observations"][1:][within], data["next_observations"][:-1][within])
    assert np.all(data["rewards"] == -1)
    again = own_dataset.generate(episodes=10, steps=6, noise=0.5, seed=0)
    np.testing.assert_array_equal(again["actions"], data["actions"])  # seeded


def test_the_controller_is_proportional_and_damped():
    policy = own_dataset.controller(0.0, np.random.default_rng(0))
    obs = np.array([[0.0, 0.0, 1.0, -1.0]], np.float32)
    goals = np.array([[0.5, -2.0, 0.0, 0.0]], np.float32)
    np.testing.assert_allclose(policy(obs, goals), [[0.5 - 0.3, -1.0]])  # the second dimension clipped at -1


def test_settings_per_method():
    defaults = own_dataset.qrl_config("qrl_defaults", 64)
    offline = own_dataset.qrl_config("qrl_offline", 64)
    scaled = own_dataset.qrl_config("qrl_offline_scaled", 64)
    assert defaults.phi_offset == 15.0 and defaults.adaptive_entropy and defaults.bc_weight == 0
    assert offline.phi_offset == 500.0 and not offline.adaptive_entropy and offline.bc_weight == 0.05
    assert offline.actor_distance_scale == "none" and scaled.actor_distance_scale == "batch_mean"
    assert offline.encoder_hidden == (64, 64)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="--updates must be increasing"):
        own_dataset.Args(updates=(5_000, 1_000))
    with pytest.raises(ValueError, match="--episodes must be a multiple of 10"):
        own_dataset.Args(episodes=15)
    with pytest.raises(ValueError, match="--noise must be >= 0"):
        own_dataset.Args(noise=-1.0)
    with pytest.raises(ValueError, match="--policies act with qrl_offline_scaled"):
        own_dataset.Args(methods=("gcbc",))
    with pytest.raises(ValueError, match="add gcbc to --methods"):
        own_dataset.Args(methods=("qrl_offline_scaled",))
    own_dataset.Args(methods=("gcbc",), policies=())  # no policy: nothing to act with


def test_the_table_gives_each_policy_beside_the_agents_at_the_last_budget():
    args = own_dataset.Args(methods=("gcbc", "qrl_offline_scaled"), seeds=(0, 1), updates=(10, 20),
                            policies=("graph_waypoints",))
    rows = [dict(method=m, seed=s, updates=u, success=0.1 * s + u / 100, at_goal_at_end=0.5 * s, train_seconds=u)
            for m in args.methods for s in args.seeds for u in args.updates]
    policy_rows = [dict(policy="graph_waypoints", seed=s, updates=20, success=1.0, at_goal_at_end=0.25 + 0.5 * s)
                   for s in args.seeds]
    table = own_dataset.format_table(dict(task="T", dataset=dict(controller_success=1.0), rows=rows,
                                          policy_rows=policy_rows), args)
    lines = table.splitlines()
    assert lines[2].split() == ["gcbc", "0.15", "±", "0.05", "0.25", "±", "0.05", "20"]
    assert lines[-3].split()[1:] == ["0.25", "±", "0.05", "0.25", "±", "0.25"]  # gcbc at 20 updates
    assert lines[-1].split()[1:] == ["graph_waypoints", "1.00", "±", "0.00", "0.50", "±", "0.25"]


def test_the_registrys_presets_are_the_measured_settings():
    """``agents.make("qrl_continuous", preset=...)`` gives the settings this benchmark measured: ``offline`` its
    scaled offline row at the preset's width, ``online`` the defaults."""
    from platonic_rl import agents

    preset = agents.make_config("qrl_continuous", preset="offline", obs_dim=4, action_dim=2)
    assert preset == own_dataset.qrl_config("qrl_offline_scaled", 128)
    assert agents.make_config("qrl_continuous", preset="online", obs_dim=4, action_dim=2,
                              **{k: getattr(preset, k) for k in ("encoder_hidden", "latent_dim", "projector_hidden",
                                                                 "iqe_components", "iqe_dim_per_component",
                                                                 "dynamics_hidden", "actor_hidden")}
                              ) == own_dataset.qrl_config("qrl_defaults", 128)


@pytest.mark.slow  # ~6 min on 2 cores: two trainings of 3,000 updates and their episodes
def test_the_offline_preset_trains_a_small_own_dataset_to_gcbcs_success(tmp_path):
    """The README's own-dataset path with the ``offline`` preset: QRL's actor reaches GCBC's success (the
    benchmark's 3 seeds: 0.99 +- 0.01 and 0.99 +- 0.02 at 3,000 updates; one seed here)."""
    args = own_dataset.Args(methods=("gcbc", "qrl_offline_scaled"), seeds=(0,), updates=(3_000,),
                            out_dir=str(tmp_path / "out"))
    rows = {r["method"]: r["success"] for r in own_dataset.run(args)["rows"]}
    assert rows["gcbc"] >= 0.9 and rows["qrl_offline_scaled"] >= rows["gcbc"] - 0.06
