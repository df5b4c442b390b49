"""MountainCar in JAX, its 160 x 160 discretisation (QRL appendix C.3.1), the offline random-actor
dataset, and exact ground-truth cost-to-go by breadth-first search.

Everything here is a pure function of arrays:

* :func:`step` is gymnasium's ``MountainCar-v0`` transition, written with ``jnp`` so it jits, vmaps and
  broadcasts over any leading batch shape (``state[..., 2]``, ``action[...]``).
* :func:`snap` discretises a state to the nearest of 160 evenly spaced bin centres per dimension,
  ``l + (u - l) / 159 * k`` (eq. C.25); :func:`discrete_step` is ``snap(step(.))``.
* Discrete states are also addressed by a flat index ``k_pos * 160 + k_vel`` in ``[0, 25600)``;
  :func:`transition_table` is the full deterministic graph ``[25600, 3] -> next index``.
* Observations given to agents are ``[u, v, 0]`` for states and :data:`GENERAL_GOAL` ``= [0.5, 0, 1]``
  for the "top of the hill" goal set (appendix C.1: general goals get an indicator dimension).
* :func:`generate_dataset` runs the uniform random actor of C.3.1 (1019 episodes, each ending at the top
  of the hill or after 250 steps) and adds one ``(s, G)`` goal-entry transition for every visited state
  inside the goal set.
* :func:`cost_to_go` gives the optimal number of steps from every discrete state to first enter a target
  set of states, over the full dynamics or over the transitions present in a dataset.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

from platonic_rl.envs.jax_env import GoalEnv

# gymnasium MountainCar-v0 constants.
MIN_POSITION, MAX_POSITION = -1.2, 0.6
MAX_SPEED = 0.07
GOAL_POSITION, GOAL_VELOCITY = 0.5, 0.0
FORCE, GRAVITY = 0.001, 0.0025
NUM_ACTIONS = 3  # 0: push left, 1: no push, 2: push right

# Discretisation (appendix C.3.1).
NUM_BINS = 160
NUM_STATES = NUM_BINS * NUM_BINS
LOW = np.array([MIN_POSITION, -MAX_SPEED], np.float32)
HIGH = np.array([MAX_POSITION, MAX_SPEED], np.float32)
BIN_WIDTH = (HIGH - LOW) / (NUM_BINS - 1)

OBS_DIM = 3
GENERAL_GOAL = np.array([GOAL_POSITION, 0.0, 1.0], np.float32)  # "top of the hill" (appendix C.1)
# Affine map of observations to about [-1, 1] per dimension (velocity spans only +-0.07): pass as
# QRLConfig(obs_center=OBS_CENTER, obs_scale=OBS_SCALE).
OBS_CENTER = (-0.3, 0.0, 0.0)
OBS_SCALE = (1 / 0.9, 1 / MAX_SPEED, 1.0)
MAX_EPISODE_STEPS = 250  # dataset episodes (C.3.1)
EVAL_EPISODE_STEPS = 200  # evaluation budget (Table 4.1)


def _check_last_dim(name: str, x, size: int):
    if x.shape[-1:] != (size,):
        raise ValueError(f"{name} must have shape [..., {size}], got shape {tuple(x.shape)}")


# ----------------------------------------------------------------------------------------- dynamics


def step(state: jax.Array, action: jax.Array) -> jax.Array:
    """gymnasium ``MountainCar-v0`` step on continuous states ``[..., (position, velocity)]``.

    v' = clip(v + (a - 1) * 0.001 - 0.0025 cos(3 p), -0.07, 0.07);  p' = clip(p + v', -1.2, 0.6);
    v' = 0 if p' hits the left wall while moving left.
    """
    state = jnp.asarray(state, jnp.float32)
    _check_last_dim("state", state, 2)
    action = jnp.asarray(action)
    if not jnp.issubdtype(action.dtype, jnp.integer):
        raise TypeError(f"action must be an integer array in {{0, 1, 2}}, got dtype {action.dtype}")
    position, velocity = state[..., 0], state[..., 1]
    velocity = velocity + (action - 1).astype(jnp.float32) * FORCE - jnp.cos(3.0 * position) * GRAVITY
    velocity = jnp.clip(velocity, -MAX_SPEED, MAX_SPEED)
    position = jnp.clip(position + velocity, MIN_POSITION, MAX_POSITION)
    velocity = jnp.where((position == MIN_POSITION) & (velocity < 0), 0.0, velocity)
    return jnp.stack([position, velocity], axis=-1)


def is_top_of_hill(state: jax.Array) -> jax.Array:
    """Membership of the goal set: position in [0.5, 0.6] and velocity in [0, 0.07]."""
    return (state[..., 0] >= GOAL_POSITION) & (state[..., 1] >= GOAL_VELOCITY)


# ----------------------------------------------------------------------------------- discretisation


def bin_index(state: jax.Array) -> jax.Array:
    """Integer bin ``[..., (k_pos, k_vel)]`` whose centre is nearest to ``state`` (ends included)."""
    state = jnp.asarray(state, jnp.float32)
    _check_last_dim("state", state, 2)
    k = jnp.floor((state - LOW) / BIN_WIDTH + 0.5).astype(jnp.int32)
    return jnp.clip(k, 0, NUM_BINS - 1)


def bin_centre(k: jax.Array) -> jax.Array:
    """Bin centres ``l + (u - l) / 159 * k`` (eq. C.25) for integer bins ``[..., 2]``."""
    return LOW + jnp.asarray(k, jnp.float32) * BIN_WIDTH


def snap(state: jax.Array) -> jax.Array:
    """Replace each dimension by the centre of the bin it falls into."""
    return bin_centre(bin_index(state))


def discrete_step(state: jax.Array, action: jax.Array) -> jax.Array:
    return snap(step(state, action))


def state_index(state: jax.Array) -> jax.Array:
    """Flat index ``k_pos * 160 + k_vel`` of the bin containing ``state``."""
    k = bin_index(state)
    return k[..., 0] * NUM_BINS + k[..., 1]


def state_from_index(index: jax.Array) -> jax.Array:
    """Discrete state (bin centres) of flat indices."""
    index = jnp.asarray(index)
    return bin_centre(jnp.stack([index // NUM_BINS, index % NUM_BINS], axis=-1))


def all_states() -> np.ndarray:
    """All 25,600 discrete states ``[25600, 2]``, ordered by flat index."""
    return np.asarray(state_from_index(jnp.arange(NUM_STATES)))


def to_observation(state: jax.Array) -> jax.Array:
    """Agent observation ``[u, v, 0]`` of a state (the extra dimension flags the general goal)."""
    state = jnp.asarray(state, jnp.float32)
    return jnp.concatenate([state, jnp.zeros(state.shape[:-1] + (1,), jnp.float32)], axis=-1)


def reset(key: jax.Array, shape: Sequence[int] = ()) -> jax.Array:
    """gymnasium's initial state (position ~ U[-0.6, -0.4], velocity 0), snapped to the grid."""
    position = jax.random.uniform(key, tuple(shape), jnp.float32, -0.6, -0.4)
    return snap(jnp.stack([position, jnp.zeros_like(position)], axis=-1))


@jax.jit
def _table() -> jax.Array:
    states = state_from_index(jnp.arange(NUM_STATES))
    actions = jnp.arange(NUM_ACTIONS)
    return state_index(discrete_step(states[:, None, :], actions[None, :]))


def transition_table() -> np.ndarray:
    """``[25600, 3]`` int array: flat index of the discrete state reached by each action."""
    return np.asarray(_table())


def goal_mask() -> np.ndarray:
    """``[25600]`` bool: discrete states inside the top-of-hill goal set."""
    return np.asarray(is_top_of_hill(all_states()))


def neighbourhood_mask(center_index: int, half_width: int = 6) -> np.ndarray:
    """``[25600]`` bool: the (2 * half_width + 1)^2 bins around a state (13 x 13 by default), clipped."""
    if not 0 <= int(center_index) < NUM_STATES:
        raise ValueError(f"center_index must be in [0, {NUM_STATES}), got {center_index}")
    kp, kv = divmod(int(center_index), NUM_BINS)
    grid_p, grid_v = np.divmod(np.arange(NUM_STATES), NUM_BINS)
    return (np.abs(grid_p - kp) <= half_width) & (np.abs(grid_v - kv) <= half_width)


# ------------------------------------------------------------------------------------------ dataset


@dataclasses.dataclass(frozen=True)
class OfflineDataset:
    """Transitions ``(s, a, s', r)`` as agent observations.

    ``actions`` is -1 for the goal-entry transitions ``(s, G)`` of appendix C.1 (they have no action).
    ``state_indices`` / ``next_state_indices`` are flat discrete indices; the general goal is
    ``NUM_STATES``.
    """

    observations: np.ndarray  # [N, 3] float32
    actions: np.ndarray  # [N] int32
    next_observations: np.ndarray  # [N, 3] float32
    rewards: np.ndarray  # [N] float32
    state_indices: np.ndarray  # [N] int32
    next_state_indices: np.ndarray  # [N] int32
    num_episodes: int
    num_goal_entries: int

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def as_batch(self) -> dict[str, np.ndarray]:
        return dict(observations=self.observations, actions=self.actions,
                    next_observations=self.next_observations, rewards=self.rewards)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _random_episodes(key: jax.Array, num_episodes: int, max_steps: int):
    key_reset, key_actions = jax.random.split(key)
    start = state_from_index(jax.random.randint(key_reset, (num_episodes,), 0, NUM_STATES))
    actions = jax.random.randint(key_actions, (max_steps, num_episodes), 0, NUM_ACTIONS)

    def body(carry, action):
        state, done = carry
        next_state = discrete_step(state, action)
        valid = ~done  # this step happens inside the episode
        done = done | is_top_of_hill(next_state)
        return (next_state, done), (state, action, next_state, valid)

    _, (s, a, s2, valid) = jax.lax.scan(body, (start, is_top_of_hill(start)), actions)
    return start, s, a, s2, valid  # time-major [T, E, ...]


def generate_dataset(seed: int = 0, num_episodes: int = 1019,
                     max_episode_steps: int = MAX_EPISODE_STEPS) -> OfflineDataset:
    """The offline dataset of appendix C.3.1: a uniform random actor, episodes ending at the top of the
    hill or after ``max_episode_steps``, plus one ``(s, G)`` transition per visited goal-set state.

    Episodes start at a uniformly random discrete state (not gymnasium's reset near the valley floor):
    C.3.1 does not say, but only this reproduces its counts (1019 episodes -> 199,888 transitions and
    240 goal entries; seed 0 here gives 200,165 and 239) and its dataset oracle's coverage.
    All transitions cost 1 (reward -1). Deterministic given ``seed``."""
    if num_episodes < 1 or max_episode_steps < 1:
        raise ValueError(f"num_episodes and max_episode_steps must be >= 1, got "
                         f"{num_episodes}, {max_episode_steps}")
    start, s, a, s2, valid = jax.device_get(_random_episodes(jax.random.PRNGKey(seed), num_episodes,
                                                      max_episode_steps))
    # Episode-major order, so consecutive rows are consecutive steps of one episode.
    s, a, s2, valid = (np.swapaxes(x, 0, 1) for x in (s, a, s2, valid))
    s, a, s2 = s[valid], a[valid].astype(np.int32), s2[valid]
    # Visited states in the goal set: start states already inside it (their episode has no step), and
    # every next-state inside it (episodes stop there).
    visited_goal = np.concatenate([start[np.asarray(is_top_of_hill(start))],
                                   s2[np.asarray(is_top_of_hill(s2))]])
    goal_obs = np.asarray(to_observation(visited_goal))
    num_goal = goal_obs.shape[0]

    obs = np.concatenate([np.asarray(to_observation(s)), goal_obs])
    next_obs = np.concatenate([np.asarray(to_observation(s2)),
                               np.broadcast_to(GENERAL_GOAL, (num_goal, OBS_DIM))])
    actions = np.concatenate([a, np.full(num_goal, -1, np.int32)])
    idx = np.asarray(state_index(s), np.int32)
    idx2 = np.asarray(state_index(s2), np.int32)
    goal_idx = np.asarray(state_index(visited_goal), np.int32)
    return OfflineDataset(
        observations=obs.astype(np.float32), actions=actions,
        next_observations=next_obs.astype(np.float32),
        rewards=np.full(len(actions), -1.0, np.float32),
        state_indices=np.concatenate([idx, goal_idx]),
        next_state_indices=np.concatenate([idx2, np.full(num_goal, NUM_STATES, np.int32)]),
        num_episodes=num_episodes, num_goal_entries=num_goal)


# ------------------------------------------------------------------------------------- ground truth


def dataset_table(dataset: OfflineDataset) -> np.ndarray:
    """``[25600, 3]`` table of the transitions present in ``dataset``; -1 where (s, a) never occurs."""
    table = np.full((NUM_STATES, NUM_ACTIONS), -1, np.int64)
    real = dataset.actions >= 0
    table[dataset.state_indices[real], dataset.actions[real]] = dataset.next_state_indices[real]
    return table


def cost_to_go(target: np.ndarray, table: np.ndarray | None = None) -> np.ndarray:
    """Optimal number of steps from every discrete state to first enter ``target``.

    Args:
      target: ``[25600]`` bool mask of the target set (a single state, a neighbourhood, the goal set).
      table: ``[25600, 3]`` next-state indices (``-1`` = transition unavailable); defaults to the full
        dynamics :func:`transition_table`. Pass :func:`dataset_table` for the "dataset transitions" oracle.

    Returns:
      ``[25600]`` float64, 0 on the target, ``inf`` where the target is unreachable.
    """
    target = np.asarray(target)
    if target.shape != (NUM_STATES,) or target.dtype != bool:
        raise ValueError(f"target must be a bool mask of shape ({NUM_STATES},), got "
                         f"{target.dtype} {target.shape}")
    if not target.any():
        raise ValueError("target must contain at least one state")
    table = transition_table() if table is None else np.asarray(table)
    if table.shape != (NUM_STATES, NUM_ACTIONS):
        raise ValueError(f"table must have shape ({NUM_STATES}, {NUM_ACTIONS}), got {table.shape}")
    # BFS on the reversed graph from a virtual sink that every target state points to.
    src, dst = np.nonzero(table >= 0)
    dst = table[src, dst]
    sink = NUM_STATES
    rev_rows = np.concatenate([dst, np.full(target.sum(), sink)])
    rev_cols = np.concatenate([src, np.nonzero(target)[0]])
    graph = scipy.sparse.csr_matrix((np.ones(len(rev_rows)), (rev_rows, rev_cols)),
                                    shape=(NUM_STATES + 1, NUM_STATES + 1))
    dist = scipy.sparse.csgraph.shortest_path(graph, directed=True, unweighted=True, indices=sink)
    return dist[:NUM_STATES] - 1.0


# --------------------------------------------------------------------------------------- evaluation


@functools.partial(jax.jit, static_argnames=("steps",))
def greedy_returns(policy: jax.Array, target: jax.Array, table: jax.Array,
                   steps: int = EVAL_EPISODE_STEPS) -> jax.Array:
    """Return of a deterministic policy from every discrete start state, all at once.

    ``policy[s]`` is the action taken in discrete state ``s`` (``[25600]`` ints); each episode gets -1
    per step until it first enters ``target`` (``[25600]`` bool), for at most ``steps`` steps. Because the
    dynamics are deterministic and discrete, this equals stepping the environment with the agent (see
    :func:`rollout_returns`), at the cost of one table lookup per step.
    """
    state = jnp.arange(NUM_STATES)

    def body(carry, _):
        state, reached, cost = carry
        state = jnp.where(reached, state, table[state, policy[state]])
        cost = cost + (~reached)
        return (state, reached | target[state], cost), None

    (_, _, cost), _ = jax.lax.scan(body, (state, target[state], jnp.zeros(NUM_STATES, jnp.int32)),
                                   None, length=steps)
    return -cost.astype(jnp.float32)


def rollout_returns(act_fn, start_states: jax.Array, goal_observation: jax.Array, target: jax.Array,
                    steps: int = EVAL_EPISODE_STEPS) -> jax.Array:
    """Same returns as :func:`greedy_returns`, by stepping the JAX environment inside ``lax.scan`` with
    ``act_fn(observations, goals) -> actions`` on a batch of continuous start states ``[N, 2]``."""
    goal = jnp.broadcast_to(goal_observation, start_states.shape[:-1] + (OBS_DIM,))

    def body(carry, _):
        state, reached, cost = carry
        next_state = discrete_step(state, act_fn(to_observation(state), goal))
        state = jnp.where(reached[..., None], state, next_state)
        cost = cost + (~reached)
        return (state, reached | target[state_index(state)], cost), None

    init = (start_states, target[state_index(start_states)], jnp.zeros(start_states.shape[:-1], jnp.int32))
    (_, _, cost), _ = jax.lax.scan(body, init, None, length=steps)
    return -cost.astype(jnp.float32)


def normalized_score(returns: np.ndarray, optimal_returns: np.ndarray,
                     floor: float = -float(EVAL_EPISODE_STEPS)) -> float:
    """100 * (mean return - floor) / (mean optimal return - floor), floor = -200 (Table 4.1)."""
    return float(100.0 * (np.mean(returns) - floor) / (np.mean(optimal_returns) - floor))


def score_policy(policy: np.ndarray, target: np.ndarray, table: np.ndarray | None = None,
                 optimal_cost: np.ndarray | None = None) -> dict:
    """Table 4.1's score of a deterministic policy table ``[25600]`` towards ``target`` ``[25600]`` (bool),
    from every discrete start state: ``score`` (:func:`normalized_score` against the optimal returns of
    :func:`cost_to_go` under the full dynamics ``table``; pass ``optimal_cost`` if already computed),
    ``mean_return``, ``mean_optimal_return``, ``success_rate`` (share of episodes that reach the target
    within the 200 steps)."""
    table = transition_table() if table is None else table
    returns = np.asarray(greedy_returns(jnp.asarray(policy), jnp.asarray(target), jnp.asarray(table)))
    optimal_cost = cost_to_go(np.asarray(target), table) if optimal_cost is None else optimal_cost
    optimal = -np.minimum(optimal_cost, EVAL_EPISODE_STEPS)
    return dict(score=normalized_score(returns, optimal), mean_return=float(returns.mean()),
                mean_optimal_return=float(optimal.mean()),
                success_rate=float(np.mean(returns > -EVAL_EPISODE_STEPS)))


# ------------------------------------------------------------------------ as a functional goal env


@dataclasses.dataclass(frozen=True)
class MountainCarGoal(GoalEnv):
    """MountainCar as a functional goal env (:mod:`platonic_rl.envs.jax_env`), for loops that run on the device
    and their fast tests: gymnasium's ``MountainCar-v0`` dynamics (:func:`step`) with the action in [-1, 1]
    rounded to a push (left / none / right), starts as gymnasium's (position U(-0.6, -0.4), at rest),
    observations ``[position, velocity]``, the goal state ``[0.5, 0]`` with ``goal_dims = (0,)``, reached when
    the position is at least the goal's (the top of the hill: gymnasium's termination), episodes of
    :data:`EVAL_EPISODE_STEPS` steps."""

    episode_length: int = EVAL_EPISODE_STEPS

    obs_dim = 2
    action_dim = 1
    goal_dims = (0,)

    def init(self, key):
        position = jax.random.uniform(key, (), minval=-0.6, maxval=-0.4)
        return jnp.stack([position, 0.0]), jnp.array([GOAL_POSITION, 0.0], jnp.float32)

    def dynamics(self, physics, action):
        return step(physics, (jnp.rint(action[0]) + 1).astype(jnp.int32))

    def observe(self, physics):
        return physics.astype(jnp.float32)

    def reached(self, observation, goal):
        return observation[0] >= goal[0]
