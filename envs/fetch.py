"""Goal-conditioned Fetch (gymnasium-robotics, MuJoCo) with goal *states*, batched (dissertation C.3.3).

The agent sees the state s (the env's ``observation`` vector) and a goal state g of the same shape: the
dimensions that the task's goal refers to (gripper position for Reach, object position for Push and Slide)
set to the target, all others zero. Episodes last 50 steps; an episode succeeds if the goal is reached
(the env's ``is_success``: within 5 cm) at any step.

Image observations (:class:`ImageRenderer`): 64x64 RGB views from a fixed camera with the env's goal
marker hidden, and goal images rendered with the goal entity moved to the target (the gripper for Reach,
the object for Push/Slide, following Contrastive RL's image Fetch) and the simulator state restored
afterwards. Off-screen rendering needs a headless OpenGL backend: this module sets ``MUJOCO_GL=egl`` unless
the variable is already set (EGL works on CPU through Mesa's llvmpipe, and on NVIDIA GPUs; use
``MUJOCO_GL=osmesa`` after ``apt-get install libosmesa6`` where EGL is missing). The variable must be set
before mujoco is first imported.

Pinned: gymnasium-robotics 1.4.2 needs mujoco < 3.12 (mujoco 3.11.0 here); only the v4 envs exist.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Sequence

import numpy as np

from platonic_rl.envs.goal_env import GoalEnvAdapter

os.environ.setdefault("MUJOCO_GL", "egl")

EPISODE_LENGTH = 50


@dataclasses.dataclass(frozen=True)
class FetchTask:
    env_id: str
    goal_dims: tuple[int, ...]  # where the goal position sits inside the observation vector
    obs_dim: int


TASKS = {
    "reach": FetchTask("FetchReach-v4", (0, 1, 2), 10),
    "push": FetchTask("FetchPush-v4", (3, 4, 5), 25),
    "slide": FetchTask("FetchSlide-v4", (3, 4, 5), 25),
}
ACTION_DIM = 4


def _task(task: str) -> FetchTask:
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    return TASKS[task]


def goal_state(task: str, positions: np.ndarray) -> np.ndarray:
    """Goal states ``[..., obs_dim]`` from goal positions ``[..., 3]`` (other dimensions zero)."""
    spec = _task(task)
    positions = np.asarray(positions, np.float32)
    if positions.shape[-1] != 3:
        raise ValueError(f"goal positions must have a last dimension of 3, got shape {positions.shape}")
    out = np.zeros(positions.shape[:-1] + (spec.obs_dim,), np.float32)
    out[..., list(spec.goal_dims)] = positions
    return out


def state_to_goal(task: str, states):
    """The goal state a state achieves (its goal dimensions kept, the rest zeroed); NumPy or JAX arrays."""
    spec = _task(task)
    mask = np.zeros(spec.obs_dim, np.float32)
    mask[list(spec.goal_dims)] = 1.0
    return states * mask


def make_vector_env(task: str, num_envs: int):
    """A synchronous gymnasium vector env of ``num_envs`` copies (C MuJoCo; processes would not help on
    2 cores)."""
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    spec = _task(task)
    return gym.make_vec(spec.env_id, num_envs=num_envs, vectorization_mode="sync")


IMAGE_SIZE = 64
# A three-quarter view of the table from the robot's right: depth is visible, the whole workspace in frame.
CAMERA = dict(lookat=(1.3, 0.75, 0.5), distance=1.3, azimuth=150.0, elevation=-30.0)


class ImageRenderer:
    """``size`` x ``size`` RGB (uint8) renders of every sub-env of a Fetch vector env from :data:`CAMERA`.

    Sites (the goal marker among them) and the mocap guide lines are hidden, so the goal is only given by
    the goal image. Call :meth:`close` when done (frees the GL contexts).
    """

    def __init__(self, env, task: str, size: int = IMAGE_SIZE, camera: dict | None = None):
        import mujoco

        _task(task)
        if size < 16:
            raise ValueError(f"ImageRenderer: size must be >= 16 pixels, got {size}")
        self.task, self.size = task, size
        self.envs = [sub.unwrapped for sub in env.envs]
        for sub in self.envs:  # the mocap body's guide lines would show the commanded gripper target
            mocap = sub.model.body("robot0:mocap").id
            sub.model.geom_rgba[sub.model.geom_bodyid == mocap, 3] = 0.0
        try:
            self.renderers = [mujoco.Renderer(sub.model, size, size) for sub in self.envs]
        except Exception as error:  # e.g. GLFW without a display
            raise RuntimeError(
                f"off-screen rendering failed ({error!r}) with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}. Set "
                "MUJOCO_GL=egl (or osmesa) in the environment before mujoco is first imported") from error
        self.camera = mujoco.MjvCamera()
        cam = {**CAMERA, **(camera or {})}
        self.camera.lookat[:] = cam["lookat"]
        self.camera.distance, self.camera.azimuth, self.camera.elevation = (
            cam["distance"], cam["azimuth"], cam["elevation"])
        self.option = mujoco.MjvOption()
        self.option.sitegroup[:] = 0

    def observe(self) -> np.ndarray:
        """Current frames ``[N, size, size, 3]`` uint8."""
        frames = []
        for sub, renderer in zip(self.envs, self.renderers):
            renderer.update_scene(sub.data, camera=self.camera, scene_option=self.option)
            frames.append(renderer.render())
        return np.stack(frames)

    def goal_images(self) -> np.ndarray:
        """Frames with each sub-env's goal entity placed at its goal; the simulator state is restored."""
        import mujoco

        frames = []
        for sub, renderer in zip(self.envs, self.renderers):
            model, data = sub.model, sub.data
            kind = mujoco.mjtState.mjSTATE_INTEGRATION
            saved = np.empty(mujoco.mj_stateSize(model, kind))
            mujoco.mj_getState(model, data, saved, kind)
            if self.task == "reach":  # drive the gripper's mocap target to the goal and let it settle
                data.mocap_pos[0] = sub.goal
                for _ in range(10):
                    mujoco.mj_step(model, data, nstep=sub.n_substeps)
            else:  # put the object on the goal, keeping its orientation
                qpos = sub._utils.get_joint_qpos(model, data, "object0:joint").copy()
                qpos[:3] = sub.goal
                sub._utils.set_joint_qpos(model, data, "object0:joint", qpos)
                mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera=self.camera, scene_option=self.option)
            frames.append(renderer.render())
            mujoco.mj_setState(model, data, saved, kind)
            mujoco.mj_forward(model, data)
        return np.stack(frames)

    def close(self):
        for renderer in self.renderers:
            renderer.close()


def rollout(env, task: str, policy: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int | Sequence[int] | None,
            renderer: ImageRenderer | None = None) -> dict[str, np.ndarray]:
    """One 50-step episode in every sub-env of ``env`` (:func:`make_vector_env`) with ``policy(obs, goals) ->
    actions [N, 4]``: :meth:`~platonic_rl.envs.goal_env.GoalEnvAdapter.rollout` with the task's goal
    dimensions (states [N, D] and goal states, or with a ``renderer`` 64x64 frames and goal images)."""
    return adapter(env, task).rollout(policy, seed, renderer)


def adapter(env, task: str) -> GoalEnvAdapter:
    """``env`` (a Fetch vector env of ``task``) as a :class:`~platonic_rl.envs.goal_env.GoalEnvAdapter`."""
    return GoalEnvAdapter(env, _task(task).goal_dims, EPISODE_LENGTH)
