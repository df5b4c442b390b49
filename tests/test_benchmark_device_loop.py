"""The device-loop benchmark's quick scale: the learning part saves its record and plot, a rerun reuses finished runs
instead of training again, other settings are refused and --overwrite retrains -- checked in the default suite with
a stand-in for the trainer (the trainer itself, several seeds in one resumable program, is tests/test_device_loop.py's),
and end to end, with real training and QRL's critic check, under ``-m slow``. (The timing parts compile QRL programs
for a minute or more on 2 cores: they run in the measurement runs, whose commands and results are kept in
docs/results/device_loop_cpu/.)"""
import dataclasses
import json
import shutil

import jax
import numpy as np
import pytest

from platonic_rl.agents.qrl_diagnostics import grid_argmin_actions
from platonic_rl.agents.qrl_policies import LatentLookahead, PolicySpec
from platonic_rl.benchmarks import device_loop, presets, report
from platonic_rl.envs import jax_env


def test_learning_records_are_saved_reused_refused_and_retrained(tmp_path, capsys, monkeypatch):
    trained, policies = [], []

    def fake_train(cfg, env, config, seed, run_dir, overwrite, desc, eval_policies):
        """success = seed / 10 at every evaluation; an evaluation policy's, (seed + 5) / 10."""
        trained.append((type(cfg).__name__, config.iterations, overwrite))
        policies.append(eval_policies)
        run_dir.mkdir(parents=True, exist_ok=True)  # as the run directory the real trainer opens
        rows = [{"iteration": i, "env_steps": 100 * i, "eval_success": sum(seed) / 10 / len(seed),
                 **{f"eval_success/{s}": s / 10 for s in seed},
                 **{f"eval_success_{p}": (sum(seed) / len(seed) + 5) / 10 for p in (eval_policies or {})},
                 **{f"eval_success_{p}/{s}": (s + 5) / 10 for p in (eval_policies or {}) for s in seed}}
                for i in range(1, config.iterations + 1) if i % config.eval_every == 0]
        return None, rows

    monkeypatch.setattr(device_loop, "train_on_device", fake_train)
    monkeypatch.setattr(device_loop, "critic_check", lambda agents, env, episodes, hold_steps: dict(
        episodes=episodes, actor=[0.5, 0.5], critic_alone=[0.25, 0.25]))
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("umaze",), methods=("gcbc", "qrl"), seeds=2,
                            out_dir=str(tmp_path))
    record = device_loop.run(args)
    assert trained == [("GCBCConfig", 12, False), ("QRLContinuousConfig", 12, False)]
    assert record["learning"]["umaze/gcbc"]["success"] == [[0.0, 0.1], [0.0, 0.1]]  # 2 evaluations x 2 seeds
    assert record["learning"]["umaze/qrl"]["critic_check"]["episodes"] == args.check_episodes
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.device_loop")
    assert saved["commit"] == report.source_commit()
    assert (tmp_path / "learning.png").stat().st_size > 10_000
    # A rerun (a fresh clone has the records, not the checkpoints) reuses both without training.
    again = device_loop.run(args)
    assert len(trained) == 2 and again["learning"] == record["learning"]
    assert capsys.readouterr().out.count("its record reused") == 2
    with pytest.raises(ValueError, match="other settings[\\s\\S]*loop.iterations: saved 12, now 6"):
        device_loop.run(device_loop.Args(**{**vars(args), "iterations": 6}))  # never mixed with another budget
    with pytest.raises(ValueError, match="check_episodes: saved 64, now 8"):  # QRL's check is part of its record
        device_loop.run(device_loop.Args(**{**vars(args), "check_episodes": 8}))
    with pytest.raises(ValueError, match=r"check_hold_steps: saved \[\], now \[5\]"):
        device_loop.run(device_loop.Args(**{**vars(args), "check_hold_steps": (5,)}))
    # --overwrite retrains this call's runs and keeps what other calls recorded.
    record = device_loop.run(device_loop.Args(**{**vars(args), "methods": ("gcbc",), "iterations": 6,
                                                 "overwrite": True}))
    assert trained[-1] == ("GCBCConfig", 6, True) and set(record["learning"]) == {"umaze/gcbc", "umaze/qrl"}
    assert len(record["learning"]["umaze/gcbc"]["success"]) == 1  # 6 iterations: one evaluation
    # QRL's deployable policies evaluated in the loop: only QRL's run gets them, they are part of its settings.
    assert policies == [None, None, None]
    with pytest.raises(ValueError, match="eval_policies"):
        device_loop.run(device_loop.Args(**{**vars(args), "methods": ("qrl",), "qrl_eval_policies": ("graph_waypoints",)}))
    graph = device_loop.Args(**{**vars(args), "methods": ("qrl",), "qrl_eval_policies": ("graph_waypoints",),
                                "overwrite": True})
    record = device_loop.run(graph)
    assert policies[-1] == {"graph_waypoints": device_loop.QRL_EVAL_POLICIES["graph_waypoints"]}
    assert record["learning"]["umaze/qrl"]["policy_success"] == {"graph_waypoints": [[0.5, 0.6], [0.5, 0.6]]}
    assert record["learning"]["umaze/qrl"]["policy_env_steps"] == [600, 1200]
    assert "umaze/qrl graph_waypoints 0.55 +- 0.05" in capsys.readouterr().out
    # targets at rest after a stall: in the env's goal form (the point maze's goal_dims, its position)
    device_loop.run(device_loop.Args(**{**vars(graph), "qrl_eval_policies": ("graph_waypoints_rest",)}))
    assert policies[-1] == {"graph_waypoints_rest": PolicySpec.of("graph_waypoints", stall_goal_dims=(0, 1))}



def test_the_quick_scale_is_a_smoke_run_of_one_maze_and_method_unless_told_otherwise():
    quick, cpu = device_loop.Args(scale="quick"), device_loop.Args()
    assert (quick.envs, quick.methods, quick.seeds) == (("umaze",), ("qrl",), 2)
    assert (cpu.envs, cpu.methods, cpu.seeds) == (("umaze", "medium", "reacher"), ("qrl", "crl", "gcbc"), 5)
    assert device_loop.Args(scale="quick", seeds=3, envs=("medium",)).seeds == 3


@pytest.mark.parametrize("scale", ["quick", "cpu"])
def test_the_host_loop_runs_the_learning_schedule_on_gymnasiums_mazes(scale):
    """host_learning's loop on gymnasium's 300- and 600-step mazes: the learning part's env steps per update exactly,
    its updates to within one cycle, its prefill, batch and evaluation episodes and spacing; the evaluation policies
    at the last 5 evaluations."""
    sizes = presets.device_loop_scales()[scale]
    learning = sizes.learning
    for name, length in (("umaze", 300), ("medium", 600)):
        loop = device_loop.host_learning_config(device_loop.Args(scale=scale), sizes, name, 1, policies=True)
        assert loop.task == device_loop.HOST_ENVS[name][0] and loop.seed == 1
        per_update = learning.num_envs * learning.unroll / learning.updates_per_iteration  # quick 200, cpu 400
        assert loop.rollouts_per_cycle * length / loop.updates_per_cycle == per_update
        cycles = (loop.env_steps / length - loop.prefill_episodes) / loop.rollouts_per_cycle
        assert cycles == int(cycles) and abs(cycles * loop.updates_per_cycle - learning.iterations
                                             * learning.updates_per_iteration) <= loop.updates_per_cycle / 2
        assert (loop.prefill_episodes, loop.batch_size, loop.eval_episodes) == (
            learning.prefill_episodes, learning.batch_size, learning.eval_episodes)
        assert loop.eval_every == learning.eval_every * learning.num_envs * learning.unroll
        assert loop.eval_policies_after == max(0, loop.env_steps - 5 * loop.eval_every)
        dataclasses.replace(loop, episode_length=length).check_budget()  # prefill + whole cycles (the env's length)
    with pytest.raises(ValueError, match=r"host_learning runs on the point mazes \['umaze', 'medium'\]"):
        device_loop.run_host_learning(device_loop.Args(scale=scale, envs=("reacher",)), sizes, None)


def test_host_learning_records_every_seed_and_reuses_them(tmp_path, monkeypatch, capsys):
    runs = []

    def fake_online(agent, config, run_dir, desc, eval_policies):
        """success = seed / 10 at every evaluation; an evaluation policy's, (seed + 5) / 10 where it acts."""
        runs.append((type(agent).__name__, config.seed, config.task))
        rows = [{"env_steps": steps, "eval_success": config.seed / 10,
                 **{f"eval_success_{p}": (config.seed + 5) / 10 for p in (eval_policies or {})
                    if steps > config.eval_policies_after}}
                for steps in range(config.eval_every, config.env_steps + 1, config.eval_every)]
        return None, rows

    monkeypatch.setattr(device_loop, "train_online", fake_online)
    args = device_loop.Args(scale="quick", parts=("host_learning",), envs=("umaze",), methods=("crl", "qrl"), seeds=2,
                            qrl_eval_policies=("graph_waypoints_rest",), out_dir=str(tmp_path))
    record = device_loop.run(args)["host_learning"]
    assert runs == [("CRLAgent", 0, "PointMaze_UMaze-v3"), ("CRLAgent", 1, "PointMaze_UMaze-v3"),
                    ("QRLContinuousAgent", 0, "PointMaze_UMaze-v3"), ("QRLContinuousAgent", 1, "PointMaze_UMaze-v3")]
    assert record["umaze/crl"]["success"] == [[0.0, 0.1]] * 3  # 3 evaluations x 2 seeds
    assert record["umaze/qrl"]["policy_success"] == {"graph_waypoints_rest": [[0.5, 0.6]] * 3}
    assert record["umaze/qrl"]["settings"]["eval_policies"] == {"graph_waypoints_rest": dict(
        policy="graph_waypoints", stall_goal_dims=[0, 1])}  # targets at rest: the position, (x, y)
    assert "umaze/qrl graph_waypoints_rest 0.55 +- 0.05" in capsys.readouterr().out
    assert (tmp_path / "host_learning.png").stat().st_size > 10_000
    device_loop.run(args)  # finished: read back, nothing trained
    assert len(runs) == 4

@pytest.mark.slow  # ~80 s on 2 cores (three device-loop programs compiled); the fast test above covers the reuse logic
def test_quick_benchmark_runs_saves_and_reuses_finished_runs(tmp_path, capsys):
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("umaze",), methods=("gcbc",), seeds=2,
                            out_dir=str(tmp_path))
    record = device_loop.run(args)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.device_loop")
    curve = record["learning"]["umaze/gcbc"]
    assert curve["env_steps"] == [16 * 300 + 16 * 50 * 6, 16 * 300 + 16 * 50 * 12]  # prefill: 16 episodes of 300 steps
    success = np.asarray(curve["success"])
    # Seeded values (CPU, the pinned jax): the 2 seeds' success over 16 episodes at each of the 2 evaluations.
    np.testing.assert_array_equal(success, [[0.1875, 0.125], [0.0625, 0.0625]])
    assert (tmp_path / "learning.png").stat().st_size > 10_000
    # A fresh clone has the record but no checkpoint: the run is reused, not trained again.
    shutil.rmtree(tmp_path / "runs" / "umaze-gcbc" / "checkpoints")
    again = device_loop.run(args)
    assert again["learning"]["umaze/gcbc"]["success"] == curve["success"]
    assert "its record reused" in capsys.readouterr().out
    with pytest.raises(ValueError, match="other settings[\\s\\S]*loop.iterations: saved 12, now 6"):
        device_loop.run(device_loop.Args(**{**vars(args), "iterations": 6}))  # never mixed with another budget
    # --overwrite retrains this call's run and keeps what other calls recorded.
    other = device_loop.Args(**{**vars(args), "methods": ("crl",), "iterations": 6})
    device_loop.run(other)
    record = device_loop.run(device_loop.Args(**{**vars(args), "iterations": 6, "overwrite": True}))
    assert set(record["learning"]) == {"umaze/gcbc", "umaze/crl"}
    assert len(record["learning"]["umaze/gcbc"]["success"]) == 1  # 6 iterations: one evaluation


@pytest.mark.slow  # ~50 s: a QRL device-loop program; grid_argmin_actions is tested fast in tests/test_qrl_diagnostics.py
def test_qrl_critic_check_acts_per_seed_on_the_same_episodes(tmp_path):
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("reacher",), methods=("qrl",), seeds=2,
                            iterations=6, check_episodes=16, check_hold_steps=(3,), out_dir=str(tmp_path))
    record = device_loop.run(args)["learning"]["reacher/qrl"]
    assert record["settings"]["agent"]["entropy_init"] == presets.device_loop_scales()["quick"].qrl_entropy_init
    assert record["settings"]["env"]["goal"] == "pose" and record["settings"]["loop"]["iterations"] == 6
    check = record["critic_check"]
    assert check["episodes"] == 16 and len(check["actor"]) == len(check["critic_alone"]) == 2
    with pytest.raises(ValueError, match="check_episodes: saved 16, now 8"):  # its check is of 16 episodes
        device_loop.run(device_loop.Args(**{**vars(args), "check_episodes": 8}))
    # By hand for seed 1 alone: its actor's mode and its grid argmin on the check's episodes.
    env = presets.device_loop_env("reacher")
    cfg = presets.device_loop_agent_config("qrl", presets.device_loop_scales()["quick"], env.obs_dim, env.action_dim)
    agents, _ = device_loop.train_on_device(cfg, env, device_loop.learning_config(args, presets.device_loop_scales()["quick"]),
                                            seed=(0, 1), run_dir=tmp_path / "runs" / "reacher-qrl")
    agent = jax.tree.map(lambda x: x[1], agents)
    key = jax.random.PRNGKey(device_loop.CHECK_KEY)
    actor = jax_env.rollout(env, lambda o, g, _: agent.step(None, o, g)[0], key, 16)["success"].mean()
    critic = jax_env.rollout(env, lambda o, g, _: grid_argmin_actions(agent, o, g, 9), key, 16)["success"].mean()
    lookahead = jax_env.rollout(env, lambda o, g, _: LatentLookahead(agent, hold_steps=3).act(o, g), key,
                                16)["success"].mean()
    # Within one episode of 16: a near-tie in the grid argmin may break differently with and without vmap.
    np.testing.assert_allclose([check["actor"][1], check["critic_alone"][1], check["lookahead"]["3"][1]],
                               [actor, critic, lookahead], atol=1 / 16 + 1e-6)


def test_final_success_is_the_mean_of_the_last_evaluations_per_seed():
    success = [[0.0, 1.0]] * 3 + [[0.5, 1.0], [0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 0.5]]
    np.testing.assert_allclose(device_loop.final_success(dict(success=success)), [0.7, 0.5])


@pytest.mark.parametrize("field, value, message", [
    ("iterations", 0, "--iterations must be a positive int"), ("reacher_goal", "joints", "--reacher-goal must be one of"),
    ("qrl_entropy_init", 0.0, "--qrl-entropy-init must be > 0"), ("check_episodes", 0, "--check-episodes"),
    ("check_hold_steps", (0,), "--check-hold-steps must be positive ints")])
def test_bad_arguments_name_the_flag(field, value, message):
    with pytest.raises(ValueError, match=message):
        device_loop.Args(**{field: value})


@pytest.mark.slow  # ~60 s: Brax's physics and a device-loop program compile
def test_brax_reacher_runs_through_the_benchmark_and_its_record_is_reused(tmp_path, capsys):
    pytest.importorskip("brax")
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("brax-reacher",), methods=("gcbc",), seeds=2,
                            out_dir=str(tmp_path))
    record = device_loop.run(args)
    success = np.asarray(record["learning"]["brax-reacher/gcbc"]["success"])
    # Seeded values (CPU, the pinned jax): the 2 seeds' success over 16 episodes at each evaluation.
    np.testing.assert_array_equal(success, [[0.6875, 0.5625], [0.375, 0.25]])
    settings = record["learning"]["brax-reacher/gcbc"]["settings"]["env"]
    assert (settings["name"], settings["env"], settings["backend"]) == ("BraxGoalEnv", "Reacher", "generalized")
    again = device_loop.run(args)  # a new env instance describes itself as the saved one: the record is reused
    assert again["learning"]["brax-reacher/gcbc"]["success"] == record["learning"]["brax-reacher/gcbc"]["success"]
    assert "its record reused" in capsys.readouterr().out
