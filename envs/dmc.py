"""DeepMind Control tasks with the Denoised MDP paper's four kinds of information, state observations.

    env = DMCEnv("cheetah-run", variant="noisy_sensor", seed=0)      # a gymnasium.Env
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

Table D.1 of the dissertation crosses controllable/uncontrollable with reward-relevant/irrelevant
information; its pixel variants are built from video backgrounds, a noisy sensor and camera jitter. The
state-observation analogues here (cumulative, like the paper's):

* ``noiseless``: the task's own observation vector (flattened dm_control observation dict).
* ``distractors``: + uncontrollable, reward-irrelevant dimensions, the analogue of the video background. Two
  sources (``distractor``):

  - ``"twin"`` (the default): ``num_twins`` copies of the task's own body, each in its own physics, driven by
    uniformly random actions (one draw per agent step, held over the action repeat) and reset with the episode;
    their observation vectors are appended as they are. A twin has as many dimensions as the agent's own
    observation and the same units, so per-dimension standardisation cannot shrink it, and its random forcing makes
    it hard to predict from its own past (an AR(2) fit per dimension explains on average about 0.6 of its variance
    on cheetah-run, against 0.997 for the smooth signals; ``tests/test_dmc_env.py``).
  - ``"signals"``: ``num_distractors`` smooth random processes n (low-passed Ornstein-Uhlenbeck signals squashed
    into (-0.5, 0.5), :class:`SmoothSignals`), observed as ``distractor_scale`` x n. These cost a model little:
    they are almost perfectly predictable from their own past, which is why ``"twin"`` replaced them as the default
    (the variants of results recorded before 2026-11-26).
* ``noisy_sensor``: ``distractors`` + the task's reward-relevant sensor perturbed by a smooth signal n in
  (-0.5, 0.5) (with ``"signals"`` the first of them; with ``"twin"`` a signal of its own, observed as
  ``distractor_scale`` x n, like the video patch that drives the pixel variant's noise), and the reward recomputed
  from the perturbed sensor with the task's own reward function (D.2.1; scales as in the official code):
  cheetah-run speed + 10 n, walker-walk torso height + 1.2 n (also the observed ``height``), reacher-easy
  finger-to-target distance + (target radius) n. The perturbed sensor is appended to the observation.
* ``jitter``: ``distractors`` + a controllable but reward-irrelevant body (a 2-D point mass driven by the
  first two action dimensions, appended to the observation) + a smooth random-walk offset (the paper's
  camera-jitter process, per dimension) added to the observed positions/orientations.

**Pixels** (``observation="pixels"``): 64x64 RGB uint8 images ``[H, W, 3]`` from camera 0, rendered once per
agent step, with Table D.1's pixel variants as the official code defines them (each after the first adds to
``distractors``):

* ``noiseless``: the rendered image.
* ``distractors`` (the video background): pixels where blue dominates (strictly greater than red and green;
  walker: greater or equal) show a grayscale video frame instead, one frame per physics step. Frames come from
  :class:`ProceduralVideo` (drifting gratings driven by smooth random phases; no data needed) or, with
  ``video_dir``, from a user's folder of videos (:class:`VideoFolder`).
* ``noisy_sensor``: + the reward sensor perturbed by n = (mean of the frame's patch [s/8, 3s/8) x [s/8, 3s/8)
  / 255 - 0.5) before every physics step, the reward recomputed from it as for states (the pixels are not
  perturbed).
* ``jitter``: + the camera translated by :class:`CameraJitter` (120 dt pixels; bilinear, black border), after
  the background is put in.

Rendering is off-screen: like :mod:`platonic_rl.envs.fetch`, this module sets ``MUJOCO_GL=egl`` unless the
variable is already set (EGL works on CPUs through Mesa; ``MUJOCO_GL=osmesa`` after ``apt-get install
libosmesa6`` where it is missing); it must be set before dm_control is first imported.

Episodes last 1000 control steps (``1000 / action_repeat`` agent steps; rewards are summed over the
repeat). ``info`` holds, for evaluation only: ``agent_state`` (the MuJoCo state, qpos and qvel, without
the horizontal root position of cheetah and walker, which their observations and rewards deliberately
ignore) and ``distractor_state`` (every distractor variable of the variant: the twins' observations or the signals,
the sensor's noise signal, point mass, jitter offsets; for pixels: the video's state, the sensor noise n and the
camera shift) and ``task_state`` (what the reward depends on that no action moves and ``agent_state`` leaves out:
reacher-easy's target position, x and y; empty for cheetah-run and walker-walk).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from scipy import ndimage

VARIANT_PARTS: dict[str, frozenset[str]] = {
    "noiseless": frozenset(),
    "distractors": frozenset({"distractors"}),
    "noisy_sensor": frozenset({"distractors", "noisy_sensor"}),
    "jitter": frozenset({"distractors", "jitter"}),
}
"""Table D.1's variants as the perturbations each adds (cumulative, as in the paper; the module docstring says what each
part does). The env reads a variant's parts, never its name."""
VARIANTS = tuple(VARIANT_PARTS)
EPISODE_STEPS = 1000  # control steps
OBSERVATIONS = ("state", "pixels")
DISTRACTORS = ("twin", "signals")  # the state variants' uncontrollable, reward-irrelevant source
os.environ.setdefault("MUJOCO_GL", "egl")
VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".gif")


def flat_observation(time_step) -> np.ndarray:
    """A dm_control time step's observation dict flattened into one float64 vector, in the dict's order."""
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in time_step.observation.values()])


# ------------------------------------------------------------------------------------------- the tasks


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """What the variants need of a dm_control task: the reward-relevant sensor that ``noisy_sensor`` perturbs (its
    reading, the scale of the perturbation, the task's reward recomputed from a perturbed reading), the observation
    keys ``jitter`` offsets, and what ``info`` and the pixel background leave out or count."""

    domain: str
    name: str
    sensor: Callable[[Any], float]                      # physics -> the sensor's reading
    sensor_scale: Callable[[Any], float]                # physics -> the scale of the noise n on it
    reward_from_sensor: Callable[[Any, float], float]   # (physics, reading) -> the task's reward
    position_keys: tuple[str, ...]                      # observation keys jitter offsets (positions, orientations)
    observed_sensor: str | None = None                  # an observation key that is the sensor (perturbed with it)
    unobservable_rootx: bool = False                    # the rootx joint's qpos left out of info["agent_state"]
    background_ties: bool = False                       # the pixel background: blue >= red and green (else >)
    task_state: Callable[[Any], np.ndarray] = lambda physics: np.zeros(0, np.float32)  # info["task_state"]


def _cheetah_reward(physics, speed: float) -> float:
    from dm_control.utils import rewards

    return float(rewards.tolerance(speed, bounds=(10, float("inf")), margin=10, value_at_margin=0, sigmoid="linear"))


def _walker_reward(physics, height: float) -> float:
    from dm_control.utils import rewards

    standing = rewards.tolerance(height, bounds=(1.2, float("inf")), margin=0.6)
    stand = (3 * standing + (1 + physics.torso_upright()) / 2) / 4
    move = rewards.tolerance(physics.horizontal_velocity(), bounds=(1, float("inf")), margin=0.5, value_at_margin=0.5,
                             sigmoid="linear")
    return float(stand * (5 * move + 1) / 6)


def _reacher_reward(physics, distance: float) -> float:
    from dm_control.utils import rewards

    radii = physics.named.model.geom_size[["target", "finger"], 0].sum()
    return float(rewards.tolerance(distance, (0, radii)))


TASKS: dict[str, TaskSpec] = {
    # Sensors and scales as in the official code (D.2.1): speed + 10 n, torso height + 1.2 n, finger-to-target
    # distance + (target radius) n; the rewards are dm_control's own shapes.
    "cheetah-run": TaskSpec("cheetah", "run", lambda physics: float(physics.speed()), lambda physics: 10.0,
                            _cheetah_reward, position_keys=("position",), unobservable_rootx=True),
    "walker-walk": TaskSpec("walker", "walk", lambda physics: float(physics.torso_height()), lambda physics: 1.2,
                            _walker_reward, position_keys=("orientations", "height"), observed_sensor="height",
                            unobservable_rootx=True, background_ties=True),
    "reacher-easy": TaskSpec(
        "reacher", "easy", lambda physics: float(physics.finger_to_target_dist()),
        lambda physics: float(physics.named.model.geom_size["target", 0]), _reacher_reward, position_keys=("position",),
        # the target's position, drawn anew each episode: the reward depends on it, no action moves it
        task_state=lambda physics: np.asarray(physics.named.model.geom_pos["target", ["x", "y"]], np.float32)),
}
"""The tasks: name -> :class:`TaskSpec`. A task is one entry (its variants compose on it)."""


@dataclasses.dataclass
class SmoothSignals:
    """``n`` smooth bounded random signals: an Ornstein-Uhlenbeck process u (u += -theta u dt + sigma sqrt(dt)
    eps), low-pass filtered (s += smoothing (u - s)), squashed to 0.5 tanh(s) in (-0.5, 0.5)."""

    n: int
    rng: np.random.Generator
    theta: float = 1.0
    sigma: float = 1.5
    dt: float = 0.02
    smoothing: float = 0.1

    def __post_init__(self):
        self.u = self.rng.normal(size=self.n)
        self.s = self.u.copy()

    def step(self) -> np.ndarray:
        self.u += -self.theta * self.u * self.dt + self.sigma * np.sqrt(self.dt) * self.rng.normal(size=self.n)
        self.s += self.smoothing * (self.u - self.s)
        return self.value

    @property
    def value(self) -> np.ndarray:
        return 0.5 * np.tanh(self.s)


@dataclasses.dataclass
class JitterWalk:
    """The paper's camera-jitter random walk, one per dimension: a ~ N(0, 0.005^2), pulled back by -0.1 dt
    when |dt| >= 0.075; v += 0.5 a; v *= 0.9^0.5; dt += 0.5 v. The offset is ``scale`` * dt."""

    n: int
    rng: np.random.Generator
    scale: float = 10.0

    def __post_init__(self):
        self.v, self.d = np.zeros(self.n), np.zeros(self.n)

    def step(self) -> np.ndarray:
        a = self.rng.normal(0.0, 0.005, self.n) - 0.1 * self.d * (np.abs(self.d) >= 0.075)
        self.v = (self.v + 0.5 * a) * 0.9 ** 0.5
        self.d = self.d + 0.5 * self.v
        return self.offset

    @property
    def offset(self) -> np.ndarray:
        return self.scale * self.d


@dataclasses.dataclass
class CameraJitter:
    """The official camera-jitter walk in 2-D: starts at dt ~ N(0, 0.075^2 / 2 I), v ~ N(0, 0.005^2 I); each
    :meth:`step` emits the shift ``pixels * dt`` (x, y), then a ~ N(0, 0.005^2 I), replaced by -0.1 dt when
    ||dt|| >= 0.075; v = (v + 0.5 a) 0.9^0.5; dt += 0.5 v."""

    rng: np.random.Generator
    pixels: float = 120.0

    def __post_init__(self):
        self.d = self.rng.normal(size=2) * 0.075 / np.sqrt(2.0)
        self.v = self.rng.normal(size=2) * 0.005

    @property
    def shift(self) -> np.ndarray:
        return self.pixels * self.d

    def step(self) -> np.ndarray:
        shift = self.shift
        a = self.rng.normal(0.0, 0.005, 2)
        if np.linalg.norm(self.d) >= 0.075:
            a = -0.1 * self.d
        self.v = (self.v + 0.5 * a) * 0.9 ** 0.5
        self.d = self.d + 0.5 * self.v
        return shift


@dataclasses.dataclass
class ProceduralVideo:
    """A grayscale moving texture, one frame per :meth:`step`: the mean of ``gratings`` sinusoidal gratings of
    random orientation and frequency whose phases drift with smooth random speeds (the official code's natural
    videos are not available offline). ``state`` (sin and cos of the phases, and the speeds) determines the
    frame."""

    size: int
    rng: np.random.Generator
    gratings: int = 3

    def __post_init__(self):
        angle = self.rng.uniform(0, np.pi, self.gratings)
        frequency = self.rng.uniform(1.5, 4.0, self.gratings) * 2 * np.pi / self.size
        yy, xx = np.mgrid[:self.size, :self.size].astype(np.float64)
        self._waves = (np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy) * frequency[:, None, None]
        self.phase = self.rng.uniform(0, 2 * np.pi, self.gratings)
        self._speed = SmoothSignals(self.gratings, self.rng)
        self.frame = self._draw()  # drawn once per step, read by the renderer and the noisy sensor

    def _draw(self) -> np.ndarray:
        value = np.sin(self._waves + self.phase[:, None, None]).mean(0)
        return np.round(127.5 + 127.5 * value).astype(np.uint8)

    @property
    def state(self) -> np.ndarray:
        return np.concatenate([np.sin(self.phase), np.cos(self.phase), self._speed.value])

    def step(self) -> np.ndarray:
        self.phase = (self.phase + 0.6 * self._speed.step()) % (2 * np.pi)  # up to 0.3 rad per physics step
        self.frame = self._draw()
        return self.frame


def _clip_frames(clip) -> np.ndarray:
    """What imageio read, as uint8 frames ``[T, H, W]`` or ``[T, H, W, C]`` (C = 3 or 4): a still image
    (``[H, W]``, ``[H, W, C]``) is one frame; a single channel is dropped."""
    clip = np.asarray(clip, np.uint8)
    if clip.ndim == 2 or (clip.ndim == 3 and clip.shape[-1] in (1, 3, 4)):
        clip = clip[None]
    if clip.ndim == 4 and clip.shape[-1] == 1:
        clip = clip[..., 0]
    if clip.ndim not in (3, 4):
        raise ValueError(f"video_dir: expected frames [T, H, W(, C)], got an array of shape {clip.shape}")
    return clip


class VideoFolder:
    """Grayscale frames from a folder of videos (read with imageio: GIFs work as installed; MP4 and other
    containers need ``pip install imageio-ffmpeg``), resized to ``size`` x ``size`` and concatenated in a seeded
    random order up to ``total_frames``; playback starts at a random frame and wraps (the official code's
    ``RandomVideoSource``). ``state`` is the frame index."""

    def __init__(self, folder: str | Path, size: int, rng: np.random.Generator, total_frames: int = 1000):
        folder = Path(folder)
        files = sorted(f for f in folder.glob("*") if f.suffix.lower() in VIDEO_SUFFIXES) if folder.is_dir() else []
        if not files:
            raise ValueError(f"video_dir={str(folder)!r} must be a folder holding videos ({', '.join(VIDEO_SUFFIXES)})")
        import imageio.v3 as iio
        from PIL import Image

        frames = []
        for f in rng.permutation(len(files)):
            try:
                clip = iio.imread(files[f], index=None)
            except Exception as error:  # noqa: BLE001 -- name the file and the likely missing plugin
                raise ValueError(f"video_dir: cannot read {files[f]} ({error}); MP4 needs `pip install "
                                 f"imageio-ffmpeg`") from error
            for image in _clip_frames(clip):
                gray = Image.fromarray(image).convert("L").resize((size, size), Image.BILINEAR)
                frames.append(np.asarray(gray))
                if len(frames) == total_frames:
                    break
            if len(frames) == total_frames:
                break
        self.frames = np.stack(frames)
        self.index = int(rng.integers(len(self.frames)))

    @property
    def frame(self) -> np.ndarray:
        return self.frames[self.index % len(self.frames)]

    @property
    def state(self) -> np.ndarray:
        return np.array([self.index % len(self.frames)], np.float64)

    def step(self) -> np.ndarray:
        self.index += 1
        return self.frame


def background_mask(image: np.ndarray, task: str) -> np.ndarray:
    """Where an RGB image ``[H, W, 3]`` shows background: blue strictly above red and green (walker: at least
    as large, the official code's rule for it)."""
    r, g, b = (image[..., i].astype(np.int16) for i in range(3))
    if TASKS[task].background_ties:
        return (b >= r) & (b >= g)
    return (b > r) & (b > g)


def translate(image: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``image`` [H, W, C] moved by ``shift`` = (x, y) pixels (bilinear; uncovered pixels black)."""
    moved = ndimage.shift(image.astype(np.float32), (shift[1], shift[0], 0), order=1, mode="constant", cval=0.0)
    return np.clip(np.round(moved), 0, 255).astype(np.uint8)


class DMCEnv(gym.Env):
    """A dm_control task as a gymnasium env with one of :data:`VARIANTS` (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, task: str = "cheetah-run", variant: str = "noiseless", seed: int | None = None,
                 action_repeat: int = 2, num_distractors: int | None = None, distractor_scale: float = 4.0,
                 observation: str = "state", image_size: int = 64, video_dir: str | Path | None = None,
                 cheap_visuals: bool = False, distractor: str = "twin", num_twins: int = 1):
        from dm_control import suite

        if task not in TASKS:
            raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if action_repeat < 1 or EPISODE_STEPS % action_repeat:
            raise ValueError(f"action_repeat must divide {EPISODE_STEPS}, got {action_repeat}")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation must be one of {OBSERVATIONS}, got {observation!r}")
        self.pixels = observation == "pixels"
        if self.pixels and (isinstance(image_size, bool) or int(image_size) != image_size or image_size < 16):
            raise ValueError(f"image_size must be an int >= 16, got {image_size!r}")
        if distractor not in DISTRACTORS:
            raise ValueError(f"distractor must be one of {DISTRACTORS}, got {distractor!r}")
        if distractor == "twin" and num_distractors is not None:
            raise ValueError("num_distractors counts the smooth signals of distractor='signals'; with distractor='twin' "
                             f"give num_twins instead (got num_distractors={num_distractors})")
        if distractor == "signals" and num_twins != 1:
            raise ValueError(f"num_twins is for distractor='twin', got num_twins={num_twins} with 'signals'")
        num_distractors = 8 if num_distractors is None else num_distractors
        self.parts = VARIANT_PARTS[variant]
        noisy = not self.pixels and "distractors" in self.parts
        if noisy and distractor == "signals" and num_distractors < 1:
            raise ValueError(f"num_distractors must be >= 1 for variant {variant!r}, got {num_distractors}")
        if noisy and distractor == "twin" and (isinstance(num_twins, bool) or int(num_twins) != num_twins
                                               or num_twins < 1):
            raise ValueError(f"num_twins must be an int >= 1 for variant {variant!r}, got {num_twins!r}")
        if video_dir is not None and not self.pixels:
            raise ValueError("video_dir is for observation='pixels' (state observations use smooth signals)")
        self.task, self.variant, self.action_repeat = task, variant, action_repeat
        self.image_size, self.video_dir = int(image_size), video_dir
        self.distractor_scale = distractor_scale
        self.distractor = distractor
        self.num_distractors = num_distractors if noisy and distractor == "signals" else 0
        self.num_twins = int(num_twins) if noisy and distractor == "twin" else 0
        self.task_spec = TASKS[task]
        domain, name = self.task_spec.domain, self.task_spec.name
        self._env = suite.load(domain, name, task_kwargs=dict(random=np.random.RandomState(seed)))
        # Each twin's physics is reset from a seed drawn from the env's generator (see reset).
        self._twins = [suite.load(domain, name, task_kwargs=dict(random=np.random.RandomState(0)))
                       for _ in range(self.num_twins)]
        if cheap_visuals:  # shadows, reflections and multisampling off: faster rendering, plainer images
            model = self._env.physics.model
            model.light_castshadow[:] = 0
            model.mat_reflectance[:] = 0
            model.vis.quality.offsamples = 0
        self._rng = np.random.default_rng(seed)
        spec = self._env.action_spec()
        self.action_space = gym.spaces.Box(spec.minimum.astype(np.float32), spec.maximum.astype(np.float32))
        self._steps = 0
        obs, _ = self.reset(seed=seed)
        if self.pixels:
            self.observation_space = gym.spaces.Box(0, 255, obs.shape, np.uint8)
        else:
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, obs.shape, np.float32)

    # ------------------------------------------------------------------------------- variants
    def _sensor(self) -> float:
        return self.task_spec.sensor(self._env.physics)

    def _sensor_scale(self) -> float:
        return self.task_spec.sensor_scale(self._env.physics)

    def _reward_from_sensor(self, sensor: float) -> float:
        """The task's reward with its sensor replaced by ``sensor`` (dm_control's own reward shapes)."""
        return self.task_spec.reward_from_sensor(self._env.physics, sensor)

    def _render(self) -> np.ndarray:
        try:
            image = self._env.physics.render(self.image_size, self.image_size, camera_id=0)
        except Exception as error:  # e.g. GLFW without a display
            raise RuntimeError(f"off-screen rendering failed ({error!r}) with MUJOCO_GL="
                               f"{os.environ.get('MUJOCO_GL')!r}. Set MUJOCO_GL=egl (or osmesa) in the environment "
                               "before dm_control is first imported") from error
        if "distractors" in self.parts:
            mask = background_mask(image, self.task)
            image = np.where(mask[..., None], self._video.frame[..., None], image)
        if "jitter" in self.parts:
            image = translate(image, self._camera.shift)
        return np.ascontiguousarray(image, np.uint8)

    def _info(self, distractor: list) -> dict:
        """``info``: the agent's MuJoCo state (without cheetah's and walker's rootx, unobservable by design), the
        variant's distractor variables concatenated, the task's uncontrolled reward variables, and the reward the
        task itself paid for the step (the unperturbed sensor's: the step's reward except with ``noisy_sensor``;
        0 on reset)."""
        state = np.delete(self._env.physics.get_state(), self._rootx_entries)
        return dict(agent_state=state.astype(np.float32),
                    distractor_state=(np.concatenate(distractor) if distractor else np.zeros(0)).astype(np.float32),
                    task_state=self._task_state(), task_reward=np.float32(self._task_reward))

    @property
    def position_dims(self) -> int:
        """How many leading entries of ``info["agent_state"]`` are positions (MuJoCo qpos, without cheetah's and
        walker's rootx); the velocities follow."""
        return int(self._env.physics.model.nq) - len(self._rootx_entries)

    @property
    def _rootx_entries(self) -> list[int]:
        """The qpos entry ``agent_state`` leaves out: cheetah's and walker's rootx, unobservable by design (cheetah's
        qpos[0], walker's qpos[1]: walker's qpos starts with rootz); none for other tasks."""
        if not self.task_spec.unobservable_rootx:
            return []
        return [int(self._env.physics.model.jnt_qposadr[self._env.physics.model.name2id("rootx", "joint")])]

    def _task_state(self) -> np.ndarray:
        """The task's own variables that the reward depends on but no action moves: reacher-easy's target
        position (x, y), drawn anew each episode; none for cheetah-run and walker-walk."""
        return self.task_spec.task_state(self._env.physics)

    def _observe_pixels(self) -> tuple[np.ndarray, dict]:
        distractor = []
        if "distractors" in self.parts:
            distractor.append(self._video.state)
        if "noisy_sensor" in self.parts:
            distractor.append([self._noise()])
        if "jitter" in self.parts:
            distractor.append(self._camera.shift)
        info = self._info(distractor)
        return self._render(), info

    def _observe(self, time_step) -> tuple[np.ndarray, dict]:
        if self.pixels:
            return self._observe_pixels()
        parts = []
        for key, value in time_step.observation.items():
            value = np.asarray(value, np.float64).ravel().copy()
            if "noisy_sensor" in self.parts and key == self.task_spec.observed_sensor:
                value += self._sensor_scale() * self._signals.value[0]
            if "jitter" in self.parts and key in self.task_spec.position_keys:
                offset = self._jitter.offset
                value += offset[self._jitter_slices[key]]
            parts.append(value)
        distractor = []
        if self.num_distractors:
            parts.append(self.distractor_scale * self._signals.value)
            distractor.append(self._signals.value)
        for twin in self._twin_observations:
            parts.append(twin)
            distractor.append(twin)
        if "noisy_sensor" in self.parts and self.num_twins:  # the noise's own signal, observed
            parts.append(self.distractor_scale * self._signals.value)
            distractor.append(self._signals.value)
        if "noisy_sensor" in self.parts:
            parts.append([self._perturbed_sensor()])
        if "jitter" in self.parts:
            parts.append(np.concatenate([self._mass_pos, self._mass_vel]))
            distractor += [self._mass_pos, self._mass_vel, self._jitter.offset]
        info = self._info(distractor)
        return np.concatenate(parts).astype(np.float32), info

    def _noise(self) -> float:
        """The sensor's perturbation n in [-0.5, 0.5]: the first smooth signal (states; with twins the only one) or
        the mean of the video frame's patch (pixels)."""
        if not self.pixels:
            return float(self._signals.value[0])
        lo, hi = self.image_size // 8, self.image_size // 8 + self.image_size // 4
        return float(self._video.frame[lo:hi, lo:hi].mean() / 255.0 - 0.5)

    def _perturbed_sensor(self) -> float:
        return self._sensor() + self._sensor_scale() * self._noise()

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._env.task._random = np.random.RandomState(seed)
        time_step = self._env.reset()
        self._steps = 0
        self._task_reward = 0.0
        self._signals = SmoothSignals(max(self.num_distractors, 1), self._rng)
        sizes = {k: int(np.size(v)) for k, v in time_step.observation.items()}
        positions = [k for k in time_step.observation if k in self.task_spec.position_keys]
        starts = np.cumsum([0] + [sizes[k] for k in positions])
        self._jitter_slices = {k: slice(starts[i], starts[i + 1]) for i, k in enumerate(positions)}
        self._jitter = JitterWalk(int(starts[-1]), self._rng)
        self._mass_pos, self._mass_vel = self._rng.uniform(-0.5, 0.5, 2), np.zeros(2)
        self._twin_observations = []
        for twin in self._twins:  # a fresh initial state per episode, drawn from the env's generator
            twin.task._random = np.random.RandomState(int(self._rng.integers(2 ** 31)))
            self._twin_observations.append(flat_observation(twin.reset()))
        if self.pixels and "distractors" in self.parts and (seed is not None or not hasattr(self, "_video")):
            # The video plays on across episodes (as the official source does) unless the env is re-seeded.
            self._video = (VideoFolder(self.video_dir, self.image_size, self._rng) if self.video_dir is not None
                           else ProceduralVideo(self.image_size, self._rng))
        if self.pixels and "jitter" in self.parts:  # drawn only here: state variants keep their random streams
            self._camera = CameraJitter(self._rng, pixels=120.0 * self.image_size / 64)
        return self._observe(time_step)

    def step(self, action):
        action = np.asarray(action, np.float64)
        if action.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {action.shape}")
        if not np.all(np.isfinite(action)):
            raise ValueError("action contains non-finite values")
        action = np.clip(action, self.action_space.low, self.action_space.high)
        reward = task_reward = 0.0
        twin_actions = [self._rng.uniform(self.action_space.low, self.action_space.high) for _ in self._twins]
        for _ in range(self.action_repeat):
            time_step = self._env.step(action)
            self._steps += 1
            if self.num_distractors or (self.num_twins and "noisy_sensor" in self.parts):
                self._signals.step()
            for i, (twin, twin_action) in enumerate(zip(self._twins, twin_actions)):
                self._twin_observations[i] = flat_observation(twin.step(twin_action))
            if "jitter" in self.parts and not self.pixels:
                self._jitter.step()
                self._mass_vel = 0.8 * self._mass_vel + 0.2 * action[:2]
                self._mass_pos = np.clip(self._mass_pos + 0.1 * self._mass_vel, -1.0, 1.0)
            paid = float(time_step.reward or 0.0)  # what the task itself pays for this step
            task_reward += paid
            reward += self._reward_from_sensor(self._perturbed_sensor()) if "noisy_sensor" in self.parts else paid
            if self.pixels and "distractors" in self.parts:  # the frame that perturbed this step's sensor, then on
                self._video.step()
            if self.pixels and "jitter" in self.parts:
                self._camera.step()
        self._task_reward = task_reward
        obs, info = self._observe(time_step)
        truncated = self._steps >= EPISODE_STEPS
        return obs, reward, False, truncated, info
