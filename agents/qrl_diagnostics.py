"""Checks of a trained continuous-action QRL agent that tell its critic's failures from its actor's.

    gap = actor_critic_gap(agent, observations, goals)              # [N]: >= 0, 0 where the actor picks the best
    actions = grid_argmin_actions(agent, observations, goals)       # [N, A]: the critic's own greedy action

Both score the actions of a ``grid_size``^A grid over [-1, 1]^A with QRL's learned distance, max over the
critics (the cost the actor is trained on):

* :func:`grid_argmin_actions` acts on the learned one-step cost c(a) = max_i d_i(T_i(f_i(s), a), f_i(g)) (the learned
  latent dynamics T_i): what a perfect one-step actor would do with this critic, no actor involved;
* :func:`actor_critic_gap` is how much of that cost the actor's mode action leaves on the table.

Observations and goals are what the agent sees (normalised). Every function is jit-able. The point maze's check of
the learned distance alone, on the env's *true* dynamics, is
:func:`~platonic_rl.benchmarks.qrl_slice.true_dynamics_greedy_actions` (it needs the env).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from platonic_rl.agents.qrl_continuous import QRLContinuousAgent


def action_grid(grid_size: int, action_dim: int) -> jax.Array:
    """Every action of a ``grid_size``^``action_dim`` grid over [-1, 1]^``action_dim``: ``[G, action_dim]``."""
    if grid_size < 2:
        raise ValueError(f"grid_size must be >= 2 (the grid spans [-1, 1]), got {grid_size}")
    axis = jnp.linspace(-1.0, 1.0, grid_size)
    return jnp.stack(jnp.meshgrid(*[axis] * action_dim, indexing="ij"), -1).reshape(-1, action_dim)


def one_step_costs(agent: QRLContinuousAgent, observations: jax.Array, goals: jax.Array, grid_size: int):
    """The learned one-step cost c(a) = max_i d_i(T_i(f_i(s), a), f_i(g)) of every action of the grid: (grid
    ``[G, A]``, costs ``[G, N]``, and the cost function ``actions [N, A] -> [N]`` itself)."""
    grid = action_grid(grid_size, agent.config.action_dim)

    def cost(actions):
        return agent.goal_distances_after(agent.critic_params, observations, actions, goals).max(0)

    return grid, jax.lax.map(lambda a: cost(jnp.broadcast_to(a, (observations.shape[0], a.shape[0]))), grid), cost


@functools.partial(jax.jit, static_argnames=("grid_size",))
def actor_critic_gap(agent: QRLContinuousAgent, observations: jax.Array, goals: jax.Array, grid_size: int = 9
                     ) -> jax.Array:
    """Does QRL's actor minimise its own objective? Per state, the learned one-step cost of the actor's mode
    action minus the lowest cost among that action and the grid's: 0 where the actor picks the best action it is
    offered, else how many steps of learned distance it leaves on the table (>= 0). ``observations``, ``goals``:
    ``[N, D]``; returns ``[N]``."""
    _, offered, cost = one_step_costs(agent, observations, goals, grid_size)
    chosen = cost(agent.act(observations, goals))
    return chosen - jnp.minimum(offered.min(0), chosen)


@functools.partial(jax.jit, static_argnames=("grid_size",))
def grid_argmin_actions(agent: QRLContinuousAgent, observations: jax.Array, goals: jax.Array, grid_size: int = 9
                        ) -> jax.Array:
    """The grid action with the lowest learned one-step cost: what a perfect one-step actor would do with QRL's
    critic (no actor involved). ``[N, A]``."""
    grid, offered, _ = one_step_costs(agent, observations, goals, grid_size)
    return grid[jnp.argmin(offered, 0)]
