"""The convergence benchmark: the agents' representations read right, the analysis on constructed representations
(aligned with the world, or noise), records reused and other settings refused -- with a stand-in trainer in the
default suite -- and end to end with real training under ``-m slow``. The alignment metrics themselves (identical ->
1, rotation -> 1, independent noise -> chance) are tests/test_replearn.py's; the shortest paths
tests/test_maze_geometry.py's."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.benchmarks import convergence


def _tiny_agents():
    return dict(qrl=QRLContinuousAgent.create(QRLContinuousConfig(
                    obs_dim=4, action_dim=2, encoder_hidden=(16,), latent_dim=8, projector_hidden=(8,), iqe_components=2,
                    iqe_dim_per_component=4, dynamics_hidden=(8,), actor_hidden=(12, 10)), 0),
                crl=CRLAgent.create(CRLConfig(obs_dim=4, action_dim=2, hidden=(16,), repr_dim=6, actor_hidden=(12, 10)), 1),
                gcbc=GCBCAgent.create(GCBCConfig(obs_dim=4, action_dim=2, hidden=(12, 10)), 2))


def test_representations_are_the_encoders_and_the_policy_features():
    agents = _tiny_agents()
    rng = np.random.default_rng(0)
    observations = jnp.asarray(rng.normal(size=(20, 4)), jnp.float32)
    goals = observations * jnp.array([1.0, 1.0, 0.0, 0.0])
    pair_states, pair_goals = jnp.arange(20), (jnp.arange(20) + 3) % 20
    pair_input = jnp.concatenate([observations[pair_states], goals[pair_goals]], -1)
    for method, agent in agents.items():
        feats = convergence.representations(method, agent, observations, goals, pair_states, pair_goals)
        assert feats["pair"].shape == (20, 10)
        # The policy's output layer applied to the features gives the policy's own output.
        params = agent.params if method == "gcbc" else agent.actor_params
        layers = params["params"] if method != "qrl" else params["params"]["TanhNormalPolicy_0"]
        out = feats["pair"] @ layers["Dense_2"]["kernel"] + layers["Dense_2"]["bias"]
        mean, _ = agent.policy.apply(params, *((pair_input,) if method != "qrl" else (pair_input[:, :4], pair_input[:, 4:])))
        np.testing.assert_allclose(out[:, :2], mean, rtol=1e-5, atol=1e-5)
    qrl = convergence.representations("qrl", agents["qrl"], observations, goals, pair_states, pair_goals)
    first = jax.tree.map(lambda x: x[0], agents["qrl"].critic_params)
    np.testing.assert_allclose(qrl["state"], agents["qrl"].critic.apply(first, observations, method="encode"))
    crl = convergence.representations("crl", agents["crl"], observations, goals, pair_states, pair_goals)
    logits = agents["crl"].critic.apply(agents["crl"].critic_params, observations, jnp.zeros((20, 2)), goals)
    phi = logits @ jnp.linalg.pinv(crl["state"]).T  # logits = phi psi^T: psi is the goal encoder's output
    np.testing.assert_allclose(phi @ crl["state"].T, logits, rtol=1e-3, atol=1e-3)
    assert "state" not in convergence.representations("gcbc", agents["gcbc"], observations, goals, pair_states,
                                                      pair_goals)
    with pytest.raises(ValueError, match="no Dense_0"):
        convergence.mlp_hidden_features({"params": {"a": {}, "b": {}}}, observations)


def _constructed_trainer(calls):
    """A stand-in for train_and_represent: Contrastive RL's features become the (x, y) positions as training goes on
    (noise shrinking to nothing at the last snapshot) and its success rises; GCBC's are noise, its success 0."""

    def train(args, scale, env_name, method, inputs):
        calls.append((env_name, method))
        rng = np.random.default_rng(len(calls))
        p = inputs["positions"]
        s, g = inputs["pair_states"], inputs["pair_goals"]
        worlds = dict(state=np.concatenate([p, np.full((len(p), 1), 20.0)], 1),
                      pair=np.concatenate([p[s], p[g], np.full((len(p), 1), 20.0)], 1))
        steps = len(scale.snapshots)
        features, success = {}, []
        for view, world in worlds.items():
            if method == "gcbc" and view == "state":
                continue
            per_seed = []
            for _ in range(args.seeds):
                if method == "crl":
                    per_seed.append([world + (1 - t / (steps - 1)) * 50 * rng.normal(size=world.shape)
                                     for t in range(steps)])
                else:
                    per_seed.append([rng.normal(size=world.shape) for _ in range(steps)])
            features[view] = np.asarray(per_seed, np.float16)
        success = [[(t / (steps - 1) if method == "crl" else 0.0) for _ in range(args.seeds)] for t in range(steps)]
        return dict(success=success, seconds=1.0,
                    settings=convergence.as_json(convergence.run_settings(args, scale, env_name, method))), features

    return train


def test_analysis_on_constructed_representations_saved_reused_and_refused(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(convergence, "train_and_represent", _constructed_trainer(calls))
    args = convergence.Args(scale="quick", envs=("umaze",), methods=("crl", "gcbc"), seeds=3, out_dir=str(tmp_path))
    record = convergence.run(args)
    assert calls == [("umaze", "crl"), ("umaze", "gcbc")]
    snapshots = convergence.scales()["quick"].snapshots
    pair = record["envs"]["umaze"]["pair"]
    m = len(pair["entries"])
    assert m == 2 * 3 * len(snapshots)
    for name in ("mutual_knn", "cka"):
        matrix = np.asarray(pair[name])
        np.testing.assert_allclose(matrix, matrix.T)
        np.testing.assert_allclose(np.diag(matrix), 1.0)
    mknn = np.asarray(pair["mutual_knn"])
    chance = args.k / (convergence.scales()["quick"].states - 1)
    last_crl = [i for i, e in enumerate(pair["entries"]) if e["method"] == "crl" and e["iteration"] == snapshots[-1]]
    gcbc = [i for i, e in enumerate(pair["entries"]) if e["method"] == "gcbc"]
    # Noise-free positions: the trained Contrastive RL seeds agree with each other and with the world's positions ...
    assert np.all(mknn[np.ix_(last_crl, last_crl)] > 0.9)
    assert min(pair["world"]["position"]["mutual_knn"][i] for i in last_crl) > 0.9
    # ... while noise agrees with nothing beyond chance.
    assert np.mean(mknn[np.ix_(gcbc, last_crl)]) < 3 * chance
    assert np.mean([pair["world"]["geodesic"]["mutual_knn"][i] for i in gcbc]) < 3 * chance
    summary = pair["summary"]
    assert summary["by_snapshot"][str(snapshots[-1])]["within"]["crl"] > 0.9
    assert summary["spearman_world_vs_success"]["position"] > 0.5  # competence and world alignment rise together
    assert "state" in record["envs"]["umaze"] and len(record["envs"]["umaze"]["state"]["entries"]) == 3 * len(snapshots)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.convergence")
    for name in ("heatmap.png", "alignment_vs_success.png", "world_vs_success.png", "within_vs_across.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    assert "Contrastive RL" in capsys.readouterr().out
    # A rerun reuses the finished runs' records and representations; other settings are refused.
    again = convergence.run(args)
    assert calls == [("umaze", "crl"), ("umaze", "gcbc")]
    np.testing.assert_allclose(again["envs"]["umaze"]["pair"]["mutual_knn"], pair["mutual_knn"])
    with pytest.raises(ValueError, match="other settings"):
        convergence.run(convergence.Args(scale="quick", envs=("umaze",), methods=("crl",), seeds=2,
                                         out_dir=str(tmp_path)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="--seeds must be an int >= 2"):
        convergence.Args(seeds=1)
    with pytest.raises(ValueError, match="--methods needs at least one value"):
        convergence.Args(methods=())


@pytest.mark.slow
def test_end_to_end_tiny_run(tmp_path):
    """Real training of the three agents (quick scale), representations read at each snapshot, the analysis saved."""
    args = convergence.Args(scale="quick", envs=("umaze",), seeds=2, out_dir=str(tmp_path))
    record = convergence.run(args)
    snapshots = convergence.scales()["quick"].snapshots
    assert set(record["runs"]) == {"umaze/qrl", "umaze/crl", "umaze/gcbc"}
    assert np.asarray(record["runs"]["umaze/qrl"]["success"]).shape == (len(snapshots), 2)
    assert len(record["envs"]["umaze"]["pair"]["entries"]) == 3 * 2 * len(snapshots)
    assert len(record["envs"]["umaze"]["state"]["entries"]) == 2 * 2 * len(snapshots)
    with np.load(tmp_path / "runs" / "umaze-qrl" / "representations.npz") as data:
        assert data["state"].shape[:3] == (2, len(snapshots), convergence.scales()["quick"].states)
        assert np.all(np.isfinite(data["pair"]))
        assert not np.allclose(data["pair"][:, 0], data["pair"][:, -1])  # training changed the features
