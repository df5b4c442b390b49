"""platonic-rl: JAX/Flax reinforcement-learning agents that learn representations of the world.

Everything is imported as ``platonic_rl.<package>``; the repository keeps one top-level folder per package
(``pyproject.toml`` maps this folder to ``platonic_rl``):

* ``platonic_rl.common``: building blocks every room may import (networks);
* ``platonic_rl.qrl``, ``platonic_rl.denoised``, ``platonic_rl.replearn``: the algorithm cores (pure functions
  and modules);
* ``platonic_rl.envs``: environments, datasets and replay buffers;
* ``platonic_rl.agents``: the importable agents;
* ``platonic_rl.benchmarks``: runnable scripts that reproduce the published tables.
"""

__version__ = "0.1.0"
