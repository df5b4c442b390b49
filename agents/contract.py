"""What a training loop needs from an agent, written down and checked once when the loop starts.

An agent is an immutable pytree (``flax.struct.PyTreeNode``) with

* ``config``: a frozen dataclass (hashable: it is static under jit);
* ``update(batch) -> (agent, metrics)``: one gradient step on a dict of arrays, pure and jit-able;
* ``act(...)``: actions from observations, pure and jit-able, in the agent's natural form: goal-conditioned
  agents (QRL, CRL, GCBC, DDPG+HER) ``act(observations, goals, rng=None) -> actions`` (a sample with ``rng``
  -- a key or an int seed -- else the deterministic action); recurrent world-model agents (Denoised MDP,
  Dreamer) ``act(latent, observations, prev_actions, rng=None) -> (actions, latent)``;
* one acting signature every loop uses, whatever the agent:
  ``initial_policy_state(batch_size)`` and ``step(policy_state, observations, goals, prev_actions, rng=None)
  -> (actions, policy_state)``. The loop carries the policy state from step to step (``None`` for the
  goal-conditioned agents, :class:`~platonic_rl.agents.common.StatelessPolicy`; the filter's latent for the
  recurrent ones) and passes the actions it executed (with exploration noise) as ``prev_actions``.

Which batch keys ``update`` reads is the agent's ``BATCH_KEYS`` (module-level in each agent file).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Protocol, runtime_checkable

import jax
import numpy as np


@runtime_checkable
class Agent(Protocol):
    config: Any

    def update(self, batch: dict) -> tuple["Agent", dict]: ...

    def act(self, *args, **kwargs) -> Any: ...

    def initial_policy_state(self, batch_size: int) -> Any: ...

    def step(self, policy_state: Any, observations: Any, goals: Any, prev_actions: Any = None,
             rng: Any = None) -> tuple[Any, Any]: ...


def check_agent(agent: Any) -> None:
    """Raise ``TypeError`` naming what ``agent`` lacks of the contract (before any compilation)."""
    name = type(agent).__name__
    required = ["update", "act", "initial_policy_state", "step"]
    missing = [m for m in required if not callable(getattr(agent, m, None))]
    if missing:
        raise TypeError(f"{name} is not an agent a training loop can use: it has no callable {missing} "
                        f"(needs {required}; see platonic_rl.agents.contract)")
    config = getattr(agent, "config", None)
    if config is None or not dataclasses.is_dataclass(config):
        raise TypeError(f"{name}.config must be a frozen dataclass (the agent's static configuration), got "
                        f"{type(config).__name__}")
    try:
        hash(config)
    except TypeError:
        raise TypeError(f"{name}.config must be hashable (frozen, tuples not lists): it is static under jit") from None


@functools.cache
def _jitted_step(policy_class):
    return jax.jit(policy_class.step)


class HostPolicy:
    """``(observations, goals) -> actions`` as NumPy from anything with the acting signature: its jitted ``step`` on
    ``preprocess``-ed observations and goals, without a key (deterministic), the policy state carried from call to
    call from ``initial_policy_state`` of the first call's batch until :meth:`reset` (the evaluations call it before
    each batch of new episodes)."""

    def __init__(self, policy: Any, preprocess: Callable = lambda x: x):
        self.policy, self.preprocess, self._step, self._state = policy, preprocess, _jitted_step(type(policy)), None

    def reset(self) -> None:
        """Start new episodes: the next call begins from ``initial_policy_state``."""
        self._state = None

    def __call__(self, observations, goals):
        if self._state is None:
            self._state = (self.policy.initial_policy_state(np.shape(observations)[0]),)
        actions, state = self._step(self.policy, self._state[0], self.preprocess(observations),
                                    self.preprocess(goals))
        self._state = (state,)
        return np.asarray(actions)


def host_policy(policy: Any, preprocess: Callable = lambda x: x) -> HostPolicy:
    """A :class:`HostPolicy` for the host-side evaluations (``envs.maze2d.evaluate``, ``envs.ogbench_maze.evaluate``,
    ``training.goal_online.evaluate``, which reset it before each batch of episodes) from anything with the acting
    signature (an agent, a policy of :mod:`platonic_rl.agents.qrl_policies`)."""
    return HostPolicy(policy, preprocess)
