"""Environments and datasets. :mod:`envs.mountaincar` is the JAX discretised MountainCar."""
