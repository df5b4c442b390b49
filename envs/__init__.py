"""Environments and datasets. :mod:`platonic_rl.envs.mountaincar` is the JAX discretised MountainCar."""
