"""Checks of a trained continuous-action QRL agent that tell its critic's failures from its actor's.

    gap = actor_critic_gap(agent, observations, goals)              # [N]: >= 0, 0 where the actor picks the best
    actions = grid_argmin_actions(agent, observations, goals)       # [N, A]: the critic's own greedy action
    actions = true_dynamics_greedy_actions(agent, PointMaze("medium"), states, goals)   # the point maze's check

All three score the actions of a ``grid_size``^A grid over [-1, 1]^A with QRL's learned distance, max over the
critics (the cost the actor is trained on):

* :func:`grid_argmin_actions` acts on the learned one-step cost c(a) = max_i d_i(T_i(f_i(s), a), f_i(g)) (the learned
  latent dynamics T_i): what a perfect one-step actor would do with this critic, no actor involved;
* :func:`actor_critic_gap` is how much of that cost the actor's mode action leaves on the table;
* :func:`true_dynamics_greedy_actions` steps the *true* dynamics of the pure-JAX point maze instead of the learned
  model and picks the action whose next state (or the state after holding the action ``hold_steps`` steps) is
  nearest the goal: no actor, no learned dynamics, so a failure there is the learned distance's own (its local
  minima, or differences between states one step apart that it does not resolve).

Observations and goals are what the agent sees (normalised), except for :func:`true_dynamics_greedy_actions`,
which takes raw point-maze states and normalises them by the layout's extent. Every function is jit-able.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from platonic_rl.agents.qrl_continuous import QRLContinuousAgent
from platonic_rl.envs.maze2d import normaliser
from platonic_rl.envs.point_maze import PointMaze


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


def true_dynamics_greedy_actions(agent: QRLContinuousAgent, env: PointMaze, observations: jax.Array,
                                  goals: jax.Array, grid_size: int = 9, hold_steps: int = 1) -> jax.Array:
    """The critic-quality check's action: of the grid over [-1, 1]^2, the action whose true next state
    (``env``'s step, the pure-JAX point maze) has the smallest learned distance to the goal, max over the
    critics. With ``hold_steps`` k > 1, the state after holding the action for k steps: the learned distance then
    has to order states k steps apart rather than one (a transition's distance is at most its cost, 1, so one step
    moves the distance by at most 1 out of the hundreds it spans). ``observations``, ``goals``: raw states
    ``[N, 4]`` (normalised here by the layout's extent); returns ``[N, 2]``. Jit-able (``hold_steps`` static)."""
    if hold_steps < 1:
        raise ValueError(f"hold_steps must be >= 1, got {hold_steps}")
    grid = action_grid(grid_size, env.action_dim)
    norm = normaliser(env.maze)

    def next_state(observation, action):
        physics = dict(position=observation[:2], velocity=observation[2:])
        for _ in range(hold_steps):
            physics = env.dynamics(physics, action)
        return env.observe(physics)

    nexts = jax.vmap(lambda o: jax.vmap(lambda a: next_state(o, a))(grid))(observations)  # [N, G, 4]
    goals = jnp.broadcast_to(goals[:, None], nexts.shape)
    costs = agent.goal_distances(norm(nexts.reshape(-1, 4)), norm(goals.reshape(-1, 4))).max(0)
    return grid[jnp.argmin(costs.reshape(observations.shape[0], -1), -1)]
