"""How any agent is trained: the run directory, the one compiled "K updates on sampled batches" function,
and the loops, one file each.

* :mod:`platonic_rl.training.run`: a run directory (config, metrics JSONL/CSV/TensorBoard, orbax checkpoints,
  exact resume) that refuses to be misused;
* :mod:`platonic_rl.training.updates`: ``update_steps(agent, sampler, keys)``, the compiled scan of updates
  every loop uses, with a finiteness check of every metric and of the agent's state;
* :mod:`platonic_rl.training.offline`: dataset -> updates (any dataset: your own ``.npz``, maze2d, OGBench, MountainCar);
* :mod:`platonic_rl.training.goal_online`: online goal-conditioned RL on host-stepped gymnasium goal envs (Fetch);
* :mod:`platonic_rl.training.world_model`: Algorithm 1 on host-stepped envs (DMC).
"""
