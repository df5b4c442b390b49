"""Several seeds of one agent as one agent: every leaf stacked on a leading seed axis, updated by ``jax.vmap``.

    stack = SeedStack.create(QRLContinuousAgent, config, seeds=(0, 1, 2))
    stack, metrics = jax.jit(SeedStack.update)(stack, batches)     # batches: every array [num_seeds, B, ...]
    agent_1 = stack.agent(1)                                      # one seed's agent, as created alone

With a sampler wrapped in :class:`~platonic_rl.envs.replay.PerSeed` (independent batches per seed), the
training loops train all seeds in one compiled call -- one ``jit(vmap(update))`` -- which on an accelerator
costs about as much as one seed while the device is not full. The seeds' agents equal agents created and
updated one by one (``tests/test_maze2d.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from platonic_rl.agents.common import StatelessPolicy, as_key


@dataclasses.dataclass(frozen=True)
class SeedStackConfig:
    agent_class: str          # the stacked agents' class name
    seeds: tuple[int, ...]    # one per stacked agent, in the leading axis's order
    agent: Any                # the agents' shared config


class SeedStack(StatelessPolicy, flax.struct.PyTreeNode):
    agents: Any  # one agent pytree, every leaf with a leading [num_seeds] axis
    config: SeedStackConfig = flax.struct.field(pytree_node=False)

    @classmethod
    def create(cls, agent_class, config, seeds) -> "SeedStack":
        seeds = tuple(int(s) for s in seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct ints (at least one), got {seeds}")
        agents = jax.vmap(lambda seed: agent_class.create(config, seed))(jnp.asarray(seeds, jnp.int32))
        return cls(agents=agents, config=SeedStackConfig(agent_class.__name__, seeds, config))

    @property
    def num_seeds(self) -> int:
        return len(self.config.seeds)

    def agent(self, index: int):
        """The agent of ``seeds[index]``."""
        return jax.tree_util.tree_map(lambda x: x[index], self.agents)

    def update(self, batch: dict) -> tuple["SeedStack", dict]:
        """One update of every seed on its own batch (each array ``[num_seeds, B, ...]``); metrics ``[num_seeds]``."""
        agents, metrics = jax.vmap(type(self.agents).update)(self.agents, batch)
        return self.replace(agents=agents), metrics

    def act(self, observations, goals, rng=None):
        """Every seed's action on its own inputs: observations and goals ``[num_seeds, ..., D]``."""
        cls = type(self.agents)
        if rng is None:
            return jax.vmap(lambda a, o, g: cls.act(a, o, g))(self.agents, observations, goals)
        keys = jax.random.split(as_key(rng), self.num_seeds)
        return jax.vmap(cls.act)(self.agents, observations, goals, keys)
