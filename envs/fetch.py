"""Goal-conditioned Fetch (gymnasium-robotics, MuJoCo) with goal *states*, batched (dissertation C.3.3).

The agent sees the state s (the env's ``observation`` vector) and a goal state g of the same shape: the
dimensions that the task's goal refers to (gripper position for Reach, object position for Push and Slide)
set to the target, all others zero. Episodes last 50 steps; an episode succeeds if the goal is reached
(the env's ``is_success``: within 5 cm) at any step.

Pinned: gymnasium-robotics 1.4.2 needs mujoco < 3.12 (mujoco 3.11.0 here); only the v4 envs exist.
Image observations come with the Fetch issue's image variant; this module is state-based for now.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

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


def rollout(env, task: str, policy: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int | None
            ) -> dict[str, np.ndarray]:
    """Run one 50-step episode in every sub-env of ``env`` with ``policy(obs [N, D], goals [N, D]) ->
    actions [N, 4]``. Returns observations [N, 51, D], actions [N, 50, 4], goals [N, D], success [N]
    (reached at any step) and final_success [N]."""
    obs, _ = env.reset(seed=seed)
    goals = goal_state(task, obs["desired_goal"])
    observations, actions, successes = [obs["observation"].astype(np.float32)], [], []
    for _ in range(EPISODE_LENGTH):
        action = np.clip(np.asarray(policy(observations[-1], goals), np.float32), -1.0, 1.0)
        obs, _, _, _, info = env.step(action)
        observations.append(obs["observation"].astype(np.float32))
        actions.append(action)
        successes.append(np.asarray(info["is_success"], bool))
    successes = np.stack(successes, 1)
    return dict(observations=np.stack(observations, 1), actions=np.stack(actions, 1), goals=goals,
                success=successes.any(1), final_success=successes[:, -1])
