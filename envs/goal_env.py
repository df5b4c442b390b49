"""Any gymnasium goal env as batches of goal *states*, for the goal-conditioned agents and their online loop.

A gymnasium goal env (as gymnasium-robotics defines them: Fetch, PointMaze, ...) returns dict observations
``{"observation": s, "achieved_goal": ag, "desired_goal": dg}`` and ``info["is_success"]``. The agents here
read states and goal states of one shape: the goal state of a goal ``dg`` is an observation vector whose
*goal dimensions* (those of ``observation`` that ``achieved_goal`` copies) hold ``dg`` and all others zero
(dissertation C.3.3). :class:`GoalEnvAdapter` finds those dimensions itself (by matching ``achieved_goal``
against ``observation`` over a few random steps) or takes them given, and runs batched, seeded episodes
of the env's fixed length.

    adapter = GoalEnvAdapter(make_gymnasium_vector_env("PointMaze_UMaze-v3", num_envs=4))
    out = adapter.rollout(policy, seed=0)     # policy(states [N, D], goal states [N, D]) -> actions [N, A]
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from platonic_rl.envs.temporary_files import private_temporary_directory


def make_gymnasium_vector_env(task: str, num_envs: int, **kwargs):
    """``gymnasium.make_vec(task, num_envs=num_envs, vectorization_mode="sync", **kwargs)`` with gymnasium-robotics'
    envs registered, made in a :func:`private_temporary_directory`, so that nothing is left behind in the system's."""
    import gymnasium as gym
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    with private_temporary_directory():
        return gym.make_vec(task, num_envs=num_envs, vectorization_mode="sync", **kwargs)


def find_goal_dims(env, steps: int = 20, seed: int = 0) -> tuple[int, ...]:
    """The dimensions of ``observation`` that ``achieved_goal`` copies, in ``achieved_goal``'s order, found by
    comparing both, in every sub-env of the vector ``env``, over ``steps`` random steps (the env is reset
    first and left mid-episode: reset it before use). Raises ``ValueError`` if a goal dimension is not a copy
    of exactly one observation dimension (pass ``goal_dims`` to the adapter then)."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    observations, achieved = [obs["observation"]], [obs["achieved_goal"]]
    for _ in range(steps):
        obs, *_ = env.step(env.action_space.sample())
        observations.append(obs["observation"])
        achieved.append(obs["achieved_goal"])
    observations = np.concatenate(observations).astype(np.float64)
    achieved = np.concatenate(achieved).astype(np.float64)
    dims = []
    for j in range(achieved.shape[1]):
        matches = [i for i in range(observations.shape[1]) if np.allclose(observations[:, i], achieved[:, j])]
        if len(matches) != 1:
            raise ValueError(f"find_goal_dims: achieved_goal[{j}] matches observation dimensions {matches} over "
                             f"{steps} random steps (needs exactly one); pass goal_dims explicitly")
        dims.append(matches[0])
    return tuple(dims)


def goal_mask(obs_dim: int, goal_dims) -> np.ndarray:
    """``[obs_dim]``: 1 on the goal dimensions, 0 elsewhere (a state times the mask is the goal it achieves)."""
    mask = np.zeros(obs_dim, np.float32)
    mask[list(goal_dims)] = 1.0
    return mask


SUCCESS_KEYS = ("is_success", "success")  # gymnasium-robotics: Fetch says is_success, PointMaze success


def success_of(info: dict) -> np.ndarray:
    """Per-env success flags from a vector env's step ``info`` (the first key of :data:`SUCCESS_KEYS` present)."""
    for key in SUCCESS_KEYS:
        if key in info:
            return np.asarray(info[key], bool)
    raise KeyError(f"the env's step info has none of the success keys {list(SUCCESS_KEYS)} (it has {sorted(info)}); "
                   "a goal env must report whether the goal is reached")


def time_limit(env) -> int | None:
    """The time limit of a gymnasium vector env's episodes: the smallest ``max_episode_steps`` of its sub-envs' specs
    (``gymnasium.make_vec(id, max_episode_steps=100)`` sets theirs, while the vector env's own spec keeps the
    registered one; None if they have specs without limits), else the vector env's own spec's; None if neither
    says."""
    try:
        specs = [spec for spec in env.get_attr("spec") if spec is not None]
    except Exception:  # noqa: BLE001 -- a vector env without get_attr
        specs = []
    if specs:  # the sub-envs' own word; none of them limited (max_episode_steps=-1 in make_vec): no limit
        limits = [spec.max_episode_steps for spec in specs if (getattr(spec, "max_episode_steps", None) or 0) > 0]
        return int(min(limits)) if limits else None
    spec = getattr(env, "spec", None)
    limit = getattr(spec, "max_episode_steps", None) if spec is not None else None
    return int(limit) if limit else None


class GoalEnvAdapter:
    """A gymnasium *vector* goal env (e.g. ``gymnasium.make_vec(id, num_envs=n)``) seen through goal states.

    ``goal_dims``: where the goal sits in the observation vector (found by :func:`find_goal_dims` if None).
    ``episode_length``: steps per episode (default, and at most: the env spec's ``max_episode_steps``); every
    episode runs exactly that many steps, so the env must not end one early. Success of an episode =
    ``info["is_success"]`` (or ``info["success"]``) at any step.
    """

    def __init__(self, env, goal_dims: tuple[int, ...] | None = None, episode_length: int | None = None):
        self.env = env
        space = getattr(env, "single_observation_space", None)
        keys = ("observation", "achieved_goal", "desired_goal")
        if space is None or not hasattr(space, "spaces") or any(k not in space.spaces for k in keys):
            raise ValueError(f"GoalEnvAdapter: env must be a gymnasium vector env of goal envs (dict observations "
                             f"with keys {list(keys)}), got {type(env).__name__} with observation space {space}")
        self.num_envs = int(env.num_envs)
        self.obs_dim = int(space["observation"].shape[0])
        self.action_dim = int(env.single_action_space.shape[0])
        self.goal_dims = tuple(goal_dims) if goal_dims is not None else find_goal_dims(env)
        if len(self.goal_dims) != space["desired_goal"].shape[0] or not all(0 <= d < self.obs_dim for d in self.goal_dims):
            raise ValueError(f"GoalEnvAdapter: goal_dims {self.goal_dims} must name {space['desired_goal'].shape[0]} "
                             f"observation dimensions in [0, {self.obs_dim})")
        limit = time_limit(env)
        if episode_length is None:
            episode_length = limit
        if not episode_length or episode_length < 1:
            raise ValueError("episode_length is not known from the env's time limit (its sub-envs' spec has no "
                             "max_episode_steps): pass it (OnlineConfig.episode_length, or GoalEnvAdapter's "
                             "episode_length)")
        if limit is not None and episode_length > limit:
            raise ValueError(f"episode_length={episode_length} (OnlineConfig.episode_length, or GoalEnvAdapter's) "
                             f"exceeds the env's time limit of {limit} steps, so the env would end episodes early; use "
                             f"at most {limit}, or make the env with a longer max_episode_steps")
        self.episode_length = int(episode_length)

    @property
    def goal_mask(self) -> np.ndarray:
        """``[obs_dim]``: 1 on the goal dimensions, 0 elsewhere (:func:`goal_mask`)."""
        return goal_mask(self.obs_dim, self.goal_dims)

    def goal_states(self, goals: np.ndarray) -> np.ndarray:
        """Goal states ``[..., obs_dim]`` of goals ``[..., len(goal_dims)]``."""
        goals = np.asarray(goals, np.float32)
        out = np.zeros(goals.shape[:-1] + (self.obs_dim,), np.float32)
        out[..., list(self.goal_dims)] = goals
        return out

    def rollout(self, policy: Callable[[np.ndarray, np.ndarray], np.ndarray], seed: int | Sequence[int] | None,
                renderer=None) -> dict[str, np.ndarray]:
        """One episode in every sub-env with ``policy(observations, goals) -> actions [N, A]`` (clipped to
        [-1, 1]). ``seed``: one reset seed per sub-env (a sequence of ``num_envs`` ints: the loops give every
        episode its own), or an int as gymnasium takes it (sub-env j gets ``seed + j``, so rollouts seeded s and
        s + 1 share all but one episode), or None. States: the policy sees states [N, D] and goal states [N, D];
        with a ``renderer`` (``observe() -> frames``, ``goal_images() -> frames``) it sees frames and goal frames
        instead.
        Returns observations [N, T + 1, D], actions [N, T, A], goals [N, D], success [N] (at any step),
        final_success [N], and with a renderer images [N, T + 1, ...] and goal_images [N, ...]."""
        if isinstance(seed, (int, np.integer)):
            seed = int(seed)
        elif seed is not None:
            seed = [None if s is None else int(s) for s in seed]
            if len(seed) != self.num_envs:
                raise ValueError(f"GoalEnvAdapter.rollout: seed must be an int, None or {self.num_envs} seeds (one per "
                                 f"sub-env), got {len(seed)} seeds")
        obs, _ = self.env.reset(seed=seed)
        goals = self.goal_states(obs["desired_goal"])
        observations, actions, successes = [obs["observation"].astype(np.float32)], [], []
        images = [renderer.observe()] if renderer else None
        goal_images = renderer.goal_images() if renderer else None
        for _ in range(self.episode_length):
            inputs = (images[-1], goal_images) if renderer else (observations[-1], goals)
            action = np.clip(np.asarray(policy(*inputs), np.float32), -1.0, 1.0)
            obs, _, terminated, truncated, info = self.env.step(action)
            if np.any(np.logical_or(terminated, truncated)) and len(actions) < self.episode_length - 1:
                raise ValueError(f"an episode ended after {len(actions) + 1} of episode_length={self.episode_length} "
                                 "steps; every episode must run its full length. Set OnlineConfig.episode_length (or "
                                 f"GoalEnvAdapter's episode_length) to at most {len(actions) + 1}, or make the env "
                                 "continue (e.g. its continuing_task mode) until then")
            observations.append(obs["observation"].astype(np.float32))
            if renderer:
                images.append(renderer.observe())
            actions.append(action)
            successes.append(success_of(info))
        successes = np.stack(successes, 1)
        out = dict(observations=np.stack(observations, 1), actions=np.stack(actions, 1), goals=goals,
                   success=successes.any(1), final_success=successes[:, -1])
        if renderer:
            out.update(images=np.stack(images, 1), goal_images=goal_images)
        return out

    def close(self) -> None:
        self.env.close()
