"""Any gymnasium goal env through GoalEnvAdapter: goal dimensions found, goal states built, success read."""
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
import gymnasium_robotics  # noqa: E402

from platonic_rl.envs.goal_env import (GoalEnvAdapter, find_goal_dims, make_gymnasium_vector_env,  # noqa: E402
                                       success_of)
from platonic_rl.envs.temporary_files import private_temporary_directory  # noqa: E402

gym.register_envs(gymnasium_robotics)


def test_pointmaze_goal_dims_goal_states_and_success_key():
    env = GoalEnvAdapter(gym.make_vec("PointMaze_UMaze-v3", num_envs=2, vectorization_mode="sync"), episode_length=20)
    assert env.goal_dims == (0, 1) and env.obs_dim == 4 and env.action_dim == 2  # observation = [x, y, vx, vy]
    np.testing.assert_array_equal(env.goal_mask, [1, 1, 0, 0])
    out = env.rollout(lambda o, g: np.zeros((len(o), 2), np.float32), seed=0)
    assert out["observations"].shape == (2, 21, 4) and out["actions"].shape == (2, 20, 2)
    assert np.all(out["goals"][:, 2:] == 0) and out["success"].dtype == bool  # PointMaze reports info["success"]
    env.close()


def test_a_maze_env_made_here_leaves_no_file_in_the_temporary_directory(tmp_path, monkeypatch):
    """gymnasium-robotics writes each maze's XML into the temporary directory and never deletes it; envs made with
    make_gymnasium_vector_env (the online loop's and the own-dataset benchmark's) leave nothing there."""
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gym.make_vec("PointMaze_UMaze-v3", num_envs=2, vectorization_mode="sync").close()
    assert [p.suffix for p in tmp_path.iterdir()].count(".xml") == 2  # what it writes without the private directory
    for p in list(tmp_path.iterdir()):
        p.unlink()
    env = make_gymnasium_vector_env("PointMaze_UMaze-v3", 2, max_episode_steps=30)
    assert env.num_envs == 2 and list(tmp_path.iterdir()) == [] and tempfile.tempdir == str(tmp_path)
    assert env.reset(seed=0)[0]["observation"].shape == (2, 4)  # the model was loaded before its file went
    env.close()
    with pytest.raises(KeyError), private_temporary_directory() as scratch:  # an error inside: restored, removed
        raise KeyError("inside")
    assert tempfile.tempdir == str(tmp_path) and not os.path.exists(scratch)


def test_episode_length_beyond_the_time_limit_and_missing_success_are_refused():
    with pytest.raises(ValueError, match=r"episode_length=301 \(OnlineConfig.episode_length, or GoalEnvAdapter's\) "
                                         "exceeds the env's time limit of 300"):
        GoalEnvAdapter(gym.make_vec("PointMaze_UMaze-v3", num_envs=1, vectorization_mode="sync"), episode_length=301)
    with pytest.raises(KeyError, match="none of the success keys"):
        success_of({"reward": np.zeros(2)})
    np.testing.assert_array_equal(success_of({"is_success": np.array([1.0, 0.0])}), [True, False])


def test_find_goal_dims_refuses_an_ambiguous_goal():
    class Twin(gym.Env):  # the goal coordinate appears twice in the observation
        def __init__(self):
            box = gym.spaces.Box(-1, 1, (1,), np.float32)
            self.observation_space = gym.spaces.Dict(observation=gym.spaces.Box(-1, 1, (2,), np.float32),
                                                     achieved_goal=box, desired_goal=box)
            self.action_space = box

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.x = np.float32(0.0)
            return self._obs(), {}

        def _obs(self):
            x = np.array([self.x], np.float32)
            return dict(observation=np.array([self.x, self.x], np.float32), achieved_goal=x, desired_goal=x)

        def step(self, action):
            self.x = np.float32(np.clip(self.x + action[0], -1, 1))
            return self._obs(), 0.0, False, False, {"is_success": False}

    with pytest.raises(ValueError, match=r"achieved_goal\[0\] matches observation dimensions \[0, 1\]"):
        find_goal_dims(gym.vector.SyncVectorEnv([Twin]))
    assert GoalEnvAdapter(gym.vector.SyncVectorEnv([Twin]), goal_dims=(1,), episode_length=3).goal_dims == (1,)


def test_the_time_limit_is_the_sub_envs_and_an_early_end_names_the_users_setting():
    # gymnasium.make_vec(..., max_episode_steps=100) limits the sub-envs; the vector env's own spec still says 300.
    vector = gym.make_vec("PointMaze_UMaze-v3", num_envs=2, vectorization_mode="sync", max_episode_steps=100)
    assert vector.spec.max_episode_steps == 300
    env = GoalEnvAdapter(vector)
    assert env.episode_length == 100
    with pytest.raises(ValueError, match="exceeds the env's time limit of 100"):
        GoalEnvAdapter(vector, episode_length=101)
    # An env that ends its episodes before the adapter's length: the error says which setting to change.
    env.episode_length = 120
    with pytest.raises(ValueError, match=r"an episode ended after 100 of episode_length=120 steps.*"
                                         r"OnlineConfig.episode_length.*at most 100"):
        env.rollout(lambda o, g: np.zeros((len(o), 2), np.float32), seed=[0, 1])
    env.close()


def test_sub_envs_without_a_time_limit_have_none():
    # make_vec(..., max_episode_steps=-1) wraps no TimeLimit: nothing ends an episode, whatever the registry says.
    vector = gym.make_vec("PointMaze_UMaze-v3", num_envs=1, vectorization_mode="sync", max_episode_steps=-1)
    from platonic_rl.envs.goal_env import time_limit

    assert time_limit(vector) is None and GoalEnvAdapter(vector, episode_length=400).episode_length == 400
    vector.close()
