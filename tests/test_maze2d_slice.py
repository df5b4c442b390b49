"""The paper-scale maze2d slice at its tiny size: a prepared dataset, chunks, evaluations, resume."""
import dataclasses
import json

import numpy as np
import pytest

from platonic_rl.benchmarks import maze2d_slice
from platonic_rl.envs import maze2d
from platonic_rl.training.signals import SIGNALS, convergence, describe, signal_value


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    path = tmp_path_factory.mktemp("slice") / "umaze.npz"
    info = maze2d.prepare_dataset(path, "umaze", size=2_000, seed=0)
    return path, info


def test_prepared_dataset_is_the_generated_trajectory(prepared):
    path, info = prepared
    data, stored = maze2d.load_prepared(path, "umaze")
    generated = maze2d.generate("umaze", 2_000, seed=0, progress=False)
    assert stored == info and info["action_noise"] == maze2d.ACTION_NOISE and info["transitions"] == 2_000
    for key in ("observations", "next_observations", "actions"):
        np.testing.assert_allclose(data[key], generated[key], atol=1e-5)
    np.testing.assert_array_equal(data["segment_end"], generated["segment_end"])
    with pytest.raises(ValueError, match="holds maze2d-umaze, not layout 'medium'"):
        maze2d.load_prepared(path, "medium")


# ~35 s end to end; the dataset, convergence measure, sizes and bad arguments have fast tests here, the critic check
# in tests/test_qrl_diagnostics.py
@pytest.mark.slow
def test_tiny_run_trains_in_chunks_evaluates_and_resumes(prepared, tmp_path, capsys):
    path, _ = prepared
    argv = ["--dataset", str(path), "--layout", "umaze", "--size", "tiny", "--updates", "100", "--chunk", "50",
            "--episodes", "4", "--episode-length", "20", "--minutes", "5", "--out-dir", str(tmp_path)]
    record = maze2d_slice.main(argv)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["updates"] == record["updates"] == 100 and saved["samples"] == 100 * 64
    assert [c["from_update"] for c in saved["chunks"]] == [0, 50]
    assert [e["updates"] for e in saved["evaluations"]] == [50, 100]  # after the first chunk, and at the end
    for evaluation in saved["evaluations"]:
        for policy in ("actor", "critic"):
            for mode in ("single", "multi"):  # D4RL-normalised 20-step returns: from about -17 (0 steps at the goal)
                assert -20 < evaluation[f"{policy}_{mode}"] < 40
    assert set(saved["signals"]) == {*SIGNALS, "flat"}
    assert [row["step"] for row in saved["history"]] == [50, 100]

    longer = argv[:argv.index("--updates") + 1] + ["150"] + argv[argv.index("--updates") + 2:]
    record = maze2d_slice.main(longer)
    assert "continuing" in capsys.readouterr().out and record["chunks"] == [record["chunks"][0]]
    assert record["chunks"][0]["from_update"] == 100 and record["updates"] == 150

    # A finished run called again trains nothing and evaluates its saved agent (not a fresh one): the same scores
    again = maze2d_slice.main(longer)
    assert again["chunks"] == [] and again["updates"] == 150 and len(again["history"]) == 3
    assert again["evaluations"] == [record["evaluations"][-1]]


def test_convergence_measures_the_tail_slope():
    rows = [{"step": s, "critic0/lagrange_multiplier": 10.0, "critic1/lagrange_multiplier": 10.0,
             "critic0/violation": float(s), "critic1/violation": float(s)} for s in range(100, 1100, 100)]
    signals = convergence(rows)
    assert signals["lagrange_multiplier"]["tail_change"] == pytest.approx(0.0, abs=1e-9)
    # the last 20%: steps 800..1000, a rise of 200 over a mean of 900
    assert signals["violation"]["tail_change"] == pytest.approx(200 / 900, rel=1e-6)
    assert signals["flat"] is False and signals["violation"]["first"] == 100 and signals["violation"]["last"] == 1000
    assert describe(signals) == "still moving over the last 20% of updates (multiplier +0.0%, violation +22.2%)"
    assert convergence(rows[:1])["flat"] is True and convergence([]) == {} and convergence([{"step": 1}]) == {}
    with pytest.raises(ValueError, match="tail must be in"):
        convergence(rows, tail=0)
    with pytest.raises(KeyError, match="critic<i>/mean_goal_distance"):
        signal_value(rows[0], "mean_goal_distance")


def test_width_and_batch_rescale_the_chosen_size():
    """``--width 256`` on the cpu size: every hidden layer at 256 with the depths and the IQE head kept, as the
    speed report's ladder case ``maze2d_qrl_w256_b256``; ``--batch-size`` replaces only the batch."""
    cpu, cpu_batch, label = maze2d_slice.agent_setting(maze2d_slice.Args(dataset="x.npz", size="cpu"))
    assert label == "cpu" and cpu.encoder_hidden == (128, 128) and cpu_batch == 256
    wide, batch, label = maze2d_slice.agent_setting(maze2d_slice.Args(dataset="x.npz", size="cpu", width=256,
                                                                        batch_size=1024))
    assert label == "cpu at width 256, batch 1024" and batch == 1024
    assert (wide.encoder_hidden, wide.dynamics_hidden, wide.projector_hidden, wide.actor_hidden) == (
        (256, 256), (256, 256), (256,), (256, 256))
    assert dataclasses.replace(wide, encoder_hidden=cpu.encoder_hidden, dynamics_hidden=cpu.dynamics_hidden,
                               projector_hidden=cpu.projector_hidden, actor_hidden=cpu.actor_hidden) == cpu
    paper, _, _ = maze2d_slice.agent_setting(maze2d_slice.Args(dataset="x.npz", size="paper", width=512))
    assert paper.encoder_hidden == (512,) * 3 and paper.actor_hidden == (512,) * 4 and paper.iqe_components == 64


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="--updates=150 must be a multiple of --chunk=100"):
        maze2d_slice.Args(dataset="x.npz", updates=150, chunk=100)
    with pytest.raises(ValueError, match="--width must be >= 1, got 0"):
        maze2d_slice.Args(dataset="x.npz", width=0)
    with pytest.raises(ValueError, match="--size must be one of"):
        maze2d_slice.Args(dataset="x.npz", size="huge")
    with pytest.raises(ValueError, match="--dataset"):
        maze2d_slice.Args()
    with pytest.raises(ValueError, match="--plot needs OUT.png and at least one results.json"):
        maze2d_slice.parse_args(["--plot", "out.png"])


def test_a_bad_slice_setting_is_refused():
    from platonic_rl.benchmarks.presets import maze2d_slice_sizes
    from platonic_rl.benchmarks.qrl_slice import SliceSetting

    config, batch = maze2d_slice_sizes()["tiny"]
    with pytest.raises(ValueError, match="SliceSetting.chunk must be >= 1, got 0"):
        SliceSetting(config, batch, "tiny", chunk=0)
    with pytest.raises(ValueError, match="SliceSetting.episode_length must be >= 0"):
        SliceSetting(config, batch, "tiny", episode_length=-1)
    with pytest.raises(ValueError, match="SliceSetting.eval_reserve must be >= 0 seconds"):
        SliceSetting(config, batch, "tiny", eval_reserve=-1.0)


def test_prepared_transitions_of_several_trajectories_load_row_by_row(tmp_path):
    """A file of several trajectories (the JAX generator's) keeps each row's own next state; a bad file is refused."""
    import jax

    from platonic_rl.envs import maze2d_jax_data
    data = maze2d_jax_data.generate("umaze", 3, 40, jax.random.PRNGKey(0))
    info = dict(layout="umaze", episodes=int(data["segment_end"].sum()), action_noise=0.5)
    maze2d.save_prepared_transitions(tmp_path / "d.npz", data, info)
    loaded, read_info = maze2d.load_prepared(tmp_path / "d.npz", "umaze")
    for key in ("observations", "next_observations", "actions", "segment_end"):
        np.testing.assert_array_equal(loaded[key], data[key].astype(loaded[key].dtype))
    assert read_info == info
    with pytest.raises(ValueError, match="holds maze2d-umaze, not layout 'medium'"):
        maze2d.load_prepared(tmp_path / "d.npz", "medium")
    with pytest.raises(ValueError, match="info lacks"):
        maze2d.save_prepared_transitions(tmp_path / "e.npz", data, dict(layout="umaze"))
    with pytest.raises(ValueError, match="segment_end marks"):
        maze2d.save_prepared_transitions(tmp_path / "e.npz", data, dict(info, episodes=info["episodes"] + 1))
    broken = dict(data, segment_end=np.zeros_like(data["segment_end"]))
    broken["segment_end"][-1] = True
    with pytest.raises(ValueError, match="next_observations\\[i\\] must equal"):
        maze2d.save_prepared_transitions(tmp_path / "e.npz", broken, dict(info, episodes=1))
    np.savez(tmp_path / "f.npz", states=data["observations"], next_states=data["next_observations"][:-1],
             actions=data["actions"], segment_end=data["segment_end"], info='{"layout": "umaze"}')
    with pytest.raises(ValueError, match="must have as many rows"):
        maze2d.load_prepared(tmp_path / "f.npz", "umaze")
