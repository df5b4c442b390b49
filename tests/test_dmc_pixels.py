"""DMC pixel variants (Table D.1 as the official code defines them): the background mask, the video background,
the noisy sensor's reward, the camera jitter, seeding, a user's video folder and bad input."""
import numpy as np
import pytest

pytest.importorskip("dm_control")
from platonic_rl.envs.dmc import (CameraJitter, DMCEnv, ProceduralVideo, VideoFolder, background_mask,  # noqa: E402
                                  translate)


def test_background_mask_is_strict_except_for_walker():
    pixels = np.array([[[10, 20, 30], [30, 20, 30], [30, 30, 30], [40, 20, 30]]], np.uint8)  # [1, 4, 3]
    np.testing.assert_array_equal(background_mask(pixels, "cheetah-run"), [[True, False, False, False]])
    np.testing.assert_array_equal(background_mask(pixels, "reacher-easy"), [[True, False, False, False]])
    np.testing.assert_array_equal(background_mask(pixels, "walker-walk"), [[True, True, True, False]])


def test_video_background_replaces_exactly_the_masked_pixels():
    plain, video = (DMCEnv("reacher-easy", v, seed=0, observation="pixels") for v in ("noiseless", "distractors"))
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 2))
    a, _ = plain.reset(seed=1)
    b, _ = video.reset(seed=1)
    for step in range(4):
        assert a.shape == b.shape == (64, 64, 3) and a.dtype == b.dtype == np.uint8
        mask = background_mask(a, "reacher-easy")
        assert 0.3 < mask.mean() < 0.98  # the arena is background, the arm and target are not
        np.testing.assert_array_equal(b[mask], np.repeat(video._video.frame[mask][:, None], 3, 1))
        np.testing.assert_array_equal(b[~mask], a[~mask])
        if step < 3:
            a, *_ = plain.step(actions[step])
            b, *_ = video.step(actions[step])


def test_the_video_advances_one_frame_per_physics_step_and_continues_across_episodes():
    env = DMCEnv("cheetah-run", "distractors", seed=0, observation="pixels", action_repeat=2)
    twin = ProceduralVideo(64, np.random.default_rng(0))  # a copy of the env's source, stepped by hand
    twin.__dict__.update({k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in env._video.__dict__.items()
                          if k != "_speed"})
    twin._speed.u, twin._speed.s = env._video._speed.u.copy(), env._video._speed.s.copy()
    twin._speed.rng = np.random.default_rng(123)
    env._video._speed.rng = np.random.default_rng(123)  # the same draws from here on
    _, _, _, _, info = env.step(np.zeros(6))
    twin.step()
    twin.step()  # two physics steps per agent step
    np.testing.assert_array_equal(env._video.frame, twin.frame)
    np.testing.assert_allclose(info["distractor_state"], twin.state.astype(np.float32))
    before = env._video.state.copy()
    env.reset()  # no seed: the video plays on
    np.testing.assert_array_equal(env._video.state, before)
    env.reset(seed=5)
    assert not np.array_equal(env._video.state, before)


@pytest.mark.parametrize("task", ["cheetah-run", "walker-walk", "reacher-easy"])
def test_noisy_sensor_reward_uses_the_patch_of_the_frame_before_the_step(task):
    env = DMCEnv(task, "noisy_sensor", seed=0, observation="pixels", action_repeat=1)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    noises = []
    for _ in range(3):
        frame = env._video.frame.copy()
        noise = frame[8:24, 8:24].mean() / 255.0 - 0.5
        _, reward, _, _, info = env.step(rng.uniform(-1, 1, env.action_space.shape))
        np.testing.assert_allclose(reward, env._reward_from_sensor(env._sensor() + env._sensor_scale() * noise),
                                   rtol=1e-6, atol=1e-9)
        noises.append(noise)
    assert all(-0.5 <= n <= 0.5 for n in noises) and len(set(noises)) > 1


def test_camera_jitter_walk_is_bounded_smooth_and_moves_the_image():
    walk = CameraJitter(np.random.default_rng(0))
    shifts = np.array([walk.step() for _ in range(20_000)])
    radius = np.linalg.norm(shifts, axis=1)
    # Pulled back beyond ||dt|| = 0.075 (9 pixels): bounded, and a minority of the time beyond it (measured on 4
    # seeds: max 12-21 pixels, 15-16% beyond 9, steps <= 2.1 pixels, per-axis std 4.8-5.0, means within 0.25).
    assert radius.max() < 25 and 0.05 < (radius > 9).mean() < 0.4
    assert np.abs(np.diff(shifts, axis=0)).max() < 3  # smooth
    assert np.abs(shifts.mean(0)).max() < 1.5 and 3 < shifts.std(0).min() and shifts.std(0).max() < 7
    image = np.zeros((8, 8, 3), np.uint8)
    image[4, 2] = 200
    moved = translate(image, np.array([3.0, -1.0]))  # 3 right, 1 up
    assert moved[3, 5, 0] == 200 and moved.sum() == 3 * 200
    assert translate(image, np.array([0.5, 0.0]))[4, 2, 0] == 100  # bilinear
    env = DMCEnv("cheetah-run", "jitter", seed=0, observation="pixels")
    _, info = env.reset(seed=0)
    np.testing.assert_allclose(info["distractor_state"][-2:], env._camera.shift, rtol=1e-6)


def test_pixel_variants_are_seeded():
    for variant in ("noiseless", "jitter"):
        runs = []
        for seed in (3, 3, 4):
            env = DMCEnv("walker-walk", variant, seed=seed, observation="pixels")
            obs, _ = env.reset(seed=seed)
            frames = [obs] + [env.step(np.full(6, 0.3))[0] for _ in range(2)]
            runs.append(np.stack(frames))
        np.testing.assert_array_equal(runs[0], runs[1])
        assert not np.array_equal(runs[0], runs[2])


def test_a_folder_of_videos_gives_the_background(tmp_path):
    from PIL import Image

    frames = [Image.fromarray(np.full((20, 30), 40 * i, np.uint8)) for i in range(5)]
    frames[0].save(tmp_path / "clip.gif", save_all=True, append_images=frames[1:], duration=40, loop=0)
    video = VideoFolder(tmp_path, 16, np.random.default_rng(0))
    assert video.frames.shape == (5, 16, 16) and video.frames.dtype == np.uint8
    np.testing.assert_array_equal(np.unique(video.frames), [0, 40, 80, 120, 160])  # flat frames stay flat
    start = int(video.state[0])
    for i in range(1, 7):  # plays on and wraps
        assert video.step()[0, 0] == 40 * ((start + i) % 5)
    env = DMCEnv("reacher-easy", "distractors", seed=0, observation="pixels", video_dir=tmp_path)
    obs, info = env.reset(seed=0)
    mask = background_mask(DMCEnv("reacher-easy", seed=0, observation="pixels").reset(seed=0)[0], "reacher-easy")
    assert set(np.unique(obs[mask])) <= {0, 40, 80, 120, 160}
    with pytest.raises(ValueError, match="must be a folder holding videos"):
        VideoFolder(tmp_path / "missing", 16, np.random.default_rng(0))


def test_video_clips_of_every_layout_become_frames():
    from platonic_rl.envs.dmc import _clip_frames

    assert _clip_frames(np.zeros((7, 20, 30))).shape == (7, 20, 30)  # a grayscale video
    assert _clip_frames(np.zeros((7, 20, 30, 3))).shape == (7, 20, 30, 3)  # RGB
    assert _clip_frames(np.zeros((7, 20, 30, 1))).shape == (7, 20, 30)  # one channel
    assert _clip_frames(np.zeros((20, 30))).shape == (1, 20, 30)  # a still image
    assert _clip_frames(np.zeros((20, 30, 4))).shape == (1, 20, 30, 4)  # a still RGBA image
    with pytest.raises(ValueError, match=r"expected frames \[T, H, W\(, C\)\]"):
        _clip_frames(np.zeros((2, 3, 20, 30, 3)))


def test_bad_pixel_arguments():
    with pytest.raises(ValueError, match="observation must be one of"):
        DMCEnv("cheetah-run", observation="rgb")
    with pytest.raises(ValueError, match="image_size must be an int >= 16"):
        DMCEnv("cheetah-run", observation="pixels", image_size=8)
    with pytest.raises(ValueError, match="video_dir is for observation='pixels'"):
        DMCEnv("cheetah-run", "distractors", video_dir="/tmp")
