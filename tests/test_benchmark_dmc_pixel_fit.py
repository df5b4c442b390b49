"""The offline pixel-fit benchmark: its error ratio by hand, the paired noiseless/video frames, reuse of finished
settings, refusal of records made otherwise, bad arguments, and a tiny fit end to end (slow)."""
import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.benchmarks import dmc_pixel_fit as fit  # noqa: E402
from platonic_rl.envs.dmc import background_mask  # noqa: E402


def test_masked_error_by_hand():
    targets = np.zeros((1, 2, 2, 3))
    images = np.zeros((1, 2, 2, 3))
    images[0, 0, 0] = [1.0, 2.0, 3.0]   # masked pixel: squared errors 1, 4, 9
    images[0, 1, 1] = [10.0, 10.0, 10.0]  # outside the mask: ignored
    mask = np.array([[[True, False], [False, False]]])
    assert fit.masked_error(images, targets, mask) == pytest.approx(14 / 3)
    assert fit.masked_error(images, targets, ~mask) == pytest.approx(300 / 9)
    assert np.isnan(fit.masked_error(images, targets, np.zeros_like(mask)))


def test_collect_renders_one_body_twice():
    data = fit.collect("cheetah-run", episodes=1, steps=3, seed=5)
    assert data["noiseless"].shape == data["video"].shape == (1, 4, 64, 64, 3)
    body = data["body"]
    np.testing.assert_array_equal(body, ~background_mask(data["noiseless"], "cheetah-run"))
    assert 0.01 < body.mean() < 0.2  # the cheetah is a small part of the frame
    np.testing.assert_array_equal(data["video"][body], data["noiseless"][body])  # the same body in both
    assert np.mean(data["video"][~body] != data["noiseless"][~body]) > 0.5  # the background replaced
    np.testing.assert_array_equal(data["prev_actions"][0, 0], 0.0)
    assert data["rewards"][0, 0] == 0.0 and data["prev_actions"].shape == (1, 4, 6)
    assert data["agent_state"].shape == (1, 4, 17)  # qpos without rootx (8), qvel (9)
    np.testing.assert_array_equal(data["pose"], data["agent_state"][..., :8])
    assert not np.array_equal(data["pose"][0, 0], data["pose"][0, -1])  # random actions move the body
    again = fit.collect("cheetah-run", episodes=1, steps=3, seed=5)
    for key, value in data.items():
        np.testing.assert_array_equal(again[key], value)


@pytest.mark.parametrize("method", ["dreamer", "denoised"])
def test_the_settings_are_the_dmc_benchmarks_pixel_configs(method):
    from platonic_rl.benchmarks.dmc import make_config

    args = fit.Args(method=method)
    for setting, (variant, width, sequences, steps, *free_nats) in fit.SETTINGS.items():
        config, batch_size, chunk = fit.setting_config(args, setting, 6)
        expected = make_config(method, "cheetah-run", variant, (64, 64, 3), 6, "cpu")
        assert config.model.conv_width == (width or 16) and (batch_size, chunk) == (sequences or 16, steps or 32)
        assert config == dataclasses.replace(expected, model=dataclasses.replace(expected.model,
                                                                                 conv_width=width or 16),
                                             free_nats=free_nats[0] if free_nats else 3.0)
    assert fit.setting_config(args, "video-freenats10", 6)[0].free_nats == 10.0
    assert fit.setting_config(args, "video", 6)[0].beta == (0.125 if method == "denoised" else 1.0)


def test_one_video_plays_on_where_per_episode_videos_start_anew():
    one = fit.collect("cheetah-run", episodes=2, steps=2, seed=3, videos="one")
    each = fit.collect("cheetah-run", episodes=2, steps=2, seed=3, videos="per-episode")
    for key in ("noiseless", "video", "agent_state"):  # the first episode is the same either way
        np.testing.assert_array_equal(one[key][0], each[key][0])
    assert not np.array_equal(one["agent_state"][1], each["agent_state"][1])  # then other seeds
    # One video: the next episode opens on the frame the last one ended on (reset does not advance the video).
    background = ~one["body"][0, -1] & ~one["body"][1, 0]
    np.testing.assert_array_equal(one["video"][1, 0][background], one["video"][0, -1][background])
    background = ~each["body"][0, -1] & ~each["body"][1, 0]
    assert np.mean(each["video"][1, 0][background] != each["video"][0, -1][background]) > 0.5
    with pytest.raises(ValueError, match="videos must be one of"):
        fit.collect("cheetah-run", episodes=1, steps=1, seed=0, videos="many")


def _record(args, setting, body_error=0.5):
    point = dict(updates=args.updates, body_error=body_error, background_error=0.9, probe_pose=0.3, probe_state=0.2,
                 recon_nll=30.0, train=dict(recon_nll=20.0))
    return dict(setting=setting, settings=fit.setting_settings(args, setting), curve=[point], seconds_per_update=0.6,
                agent_config=dict(model=dict(conv_width=16)), batch_size=16, chunk=32)


def test_finished_settings_are_reused_without_rendering(tmp_path, monkeypatch):
    args = fit.Args(settings=("noiseless", "video"), updates=4, measure_every=2, out_dir=str(tmp_path))
    for setting, error in (("noiseless", 0.2), ("video", 0.9)):
        (tmp_path / setting).mkdir()
        (tmp_path / setting / fit.RECORD).write_text(json.dumps(_record(args, setting, error)))
    monkeypatch.setattr(fit, "collect", lambda *a, **k: pytest.fail("rendered frames for finished settings"))
    saved = fit.run(args)
    assert [r["curve"][-1]["body_error"] for r in saved["records"]] == [0.2, 0.9]
    assert "noiseless | 16 | 16 x 32 | 0.60 | 0.200 | 0.900 | 0.300 | 0.200 | 30.0 | 20.0" in saved["table"]
    assert (tmp_path / "fit.png").exists() and not (tmp_path / "reconstructions.png").exists()


def test_a_record_made_with_other_settings_is_refused(tmp_path):
    args = fit.Args(settings=("video",), updates=4, measure_every=2, out_dir=str(tmp_path))
    (tmp_path / "video").mkdir()
    other = fit.Args(settings=("video",), updates=6, measure_every=2, out_dir=str(tmp_path))
    (tmp_path / "video" / fit.RECORD).write_text(json.dumps(_record(other, "video")))
    with pytest.raises(ValueError, match="other settings"):
        fit.run(args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(settings=("video-wide",)), "settings must be names"),
    (dict(settings=()), "settings must be names"),
    (dict(task="cartpole"), "task must be one of"),
    (dict(updates=10, measure_every=3), "measure_every must divide updates"),
    (dict(test_episodes=4, probe_train=4), "probe_train"),
    (dict(episodes=0), "episodes must be >= 1"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit.Args(**kwargs)


def test_episodes_shorter_than_a_sequence_are_refused(tmp_path):
    args = fit.Args(settings=("video",), episode_steps=20, updates=2, measure_every=2, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="episode_steps must be at least 31"):
        fit.run(args)


@pytest.mark.slow  # ~1 min: renders 5 short episodes, compiles the conv world model
def test_a_tiny_fit_end_to_end(tmp_path):
    args = fit.Args(settings=("video",), episodes=2, test_episodes=3, probe_train=2, episode_steps=31, updates=4,
                    measure_every=2, out_dir=str(tmp_path))
    saved = fit.run(args)
    curve = saved["records"][0]["curve"]
    assert [c["updates"] for c in curve] == [2, 4]
    for c in curve:
        assert all(np.isfinite(c[k]) for k in ("body_error", "background_error", "recon_nll", "probe_pose"))
        assert c["train"]["recon_nll"] > 0
    assert (tmp_path / "video" / fit.RECORD).exists()
    assert (tmp_path / "fit.png").exists() and (tmp_path / "reconstructions.png").exists()
