"""The device-loop benchmark's quick scale: the learning part runs end to end (several seeds in one program, in a
resumable run directory), saves its record and plot, and a rerun reuses finished runs instead of training again.
(The timing parts compile QRL programs for a minute or more on 2 cores: they run in the measurement runs, whose
commands and results are kept in docs/results/device_loop_cpu/.)"""
import json
import shutil

import jax
import numpy as np
import pytest

from platonic_rl.benchmarks import device_loop
from platonic_rl.benchmarks.maze2d import grid_argmin_actions
from platonic_rl.envs import jax_env


def test_quick_benchmark_runs_saves_and_reuses_finished_runs(tmp_path, capsys):
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("umaze",), methods=("gcbc",), seeds=2,
                            out_dir=str(tmp_path))
    record = device_loop.run(args)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["command"].startswith("python -m platonic_rl.benchmarks.device_loop")
    curve = record["learning"]["umaze/gcbc"]
    assert curve["env_steps"] == [16 * 300 + 16 * 50 * 6, 16 * 300 + 16 * 50 * 12]  # prefill: 16 episodes of 300 steps
    success = np.asarray(curve["success"])
    assert success.shape == (2, 2) and np.all((success >= 0) & (success <= 1))
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


def test_qrl_critic_check_acts_per_seed_on_the_same_episodes(tmp_path):
    args = device_loop.Args(scale="quick", parts=("learning",), envs=("reacher",), methods=("qrl",), seeds=2,
                            iterations=6, check_episodes=16, out_dir=str(tmp_path))
    record = device_loop.run(args)["learning"]["reacher/qrl"]
    assert record["settings"]["agent"]["entropy_init"] == device_loop.scales()["quick"].qrl_entropy_init
    assert record["settings"]["env"]["goal"] == "pose" and record["settings"]["loop"]["iterations"] == 6
    check = record["critic_check"]
    assert check["episodes"] == 16 and len(check["actor"]) == len(check["critic_alone"]) == 2
    with pytest.raises(ValueError, match="check_episodes: saved 16, now 8"):  # its check is of 16 episodes
        device_loop.run(device_loop.Args(**{**vars(args), "check_episodes": 8}))
    # By hand for seed 1 alone: its actor's mode and its grid argmin on the check's episodes.
    env = device_loop.make_env("reacher")
    cfg = device_loop.agent_config("qrl", device_loop.scales()["quick"], env.obs_dim, env.action_dim)
    agents, _ = device_loop.train_on_device(cfg, env, device_loop.learning_config(args, device_loop.scales()["quick"]),
                                            seed=(0, 1), run_dir=tmp_path / "runs" / "reacher-qrl")
    agent = jax.tree.map(lambda x: x[1], agents)
    key = jax.random.PRNGKey(device_loop.CHECK_KEY)
    actor = jax_env.rollout(env, lambda o, g, _: agent.step(None, o, g)[0], key, 16)["success"].mean()
    critic = jax_env.rollout(env, lambda o, g, _: grid_argmin_actions(agent, o, g, 9), key, 16)["success"].mean()
    # Within one episode of 16: a near-tie in the grid argmin may break differently with and without vmap.
    np.testing.assert_allclose([check["actor"][1], check["critic_alone"][1]], [actor, critic], atol=1 / 16 + 1e-6)


def test_final_success_is_the_mean_of_the_last_evaluations_per_seed():
    success = [[0.0, 1.0]] * 3 + [[0.5, 1.0], [0.5, 0.0], [1.0, 0.0], [1.0, 1.0], [0.5, 0.5]]
    np.testing.assert_allclose(device_loop.final_success(dict(success=success)), [0.7, 0.5])


@pytest.mark.parametrize("field, value, message", [
    ("iterations", 0, "--iterations must be a positive int"), ("reacher_goal", "joints", "--reacher-goal must be one of"),
    ("qrl_entropy_init", 0.0, "--qrl-entropy-init must be > 0"), ("check_episodes", 0, "--check-episodes")])
def test_bad_arguments_name_the_flag(field, value, message):
    with pytest.raises(ValueError, match=message):
        device_loop.Args(**{field: value})
