"""Episode replay buffer with goal relabelling, as a jittable pytree (for online goal-conditioned RL).

The buffer stores whole fixed-length episodes in preallocated device arrays and is itself an immutable
pytree: ``add`` and ``sample`` are pure functions (jit them, or run them inside ``lax.scan`` with the
agent), so a training iteration never leaves the device and the buffer checkpoints with orbax like any
other pytree.

Episode layout (horizon T): ``observations [E, T + 1, *obs_shape]`` (the last one is the final
next-state; ``obs_shape`` is ``(D,)`` for vectors or e.g. ``(64, 64, 3)`` uint8 for images),
``actions [E, T, A]``. A sample picks an episode uniformly among the stored ones and a step t uniformly in
[0, T), and returns (s_t, a_t, s_{t+1}) with a goal state drawn as

* with probability ``p_future``: s_{t+k} from the same episode, k in {0, ..., T - t} with probability
  proportional to ``discount``^k (a truncated geometric, sampled exactly by inverse CDF);
* otherwise: a uniformly random state of a uniformly random stored episode.

Why not flashbax: its trajectory buffer samples sequences, not (transition, future-state) pairs with a
truncated-geometric offset, and this buffer is ~100 lines of jittable code with exact tests.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


def truncated_geometric(key: jax.Array, max_k: jax.Array, discount: float) -> jax.Array:
    """k in {0, ..., max_k} (elementwise) with P(k) = discount^k (1 - discount) / (1 - discount^(max_k + 1)),
    sampled exactly by inverse CDF: the offset of a future-state goal."""
    u = jax.random.uniform(key, max_k.shape)
    k = jnp.floor(jnp.log1p(-u * (1 - discount ** (max_k + 1.0))) / jnp.log(discount)).astype(jnp.int32)
    return jnp.clip(k, 0, max_k)


def _checked_sizes(owner: str, obs_shape: int | tuple[int, ...], **sizes: int) -> tuple[int, ...]:
    """``obs_shape`` as a tuple, after checking it and every named size is made of positive ints."""
    obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
    if not obs_shape:
        raise ValueError(f"{owner}: obs_shape must have at least one dimension")
    for name, value in (*sizes.items(), *((f"obs_shape[{i}]", n) for i, n in enumerate(obs_shape))):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return obs_shape


class _EpisodeRing:
    """What both buffers share: arrays with a leading episode axis, filled as a ring (``size`` stored,
    ``insert_at`` next), and resizing that keeps every stored episode."""

    @property
    def capacity(self) -> int:
        return self.observations.shape[0]

    def resized(self, capacity: int):
        """The same episodes, oldest first, in a buffer of ``capacity`` episodes (e.g. a resumed run whose
        budget grew). A buffer that never wrapped keeps every episode at its row, so it samples exactly as one
        created at ``capacity``. Refuses to drop stored episodes."""
        owner = type(self).__name__
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"{owner}.resized: capacity must be a positive int, got {capacity!r}")
        size = int(self.size)
        if capacity < size:
            raise ValueError(f"{owner}.resized: capacity {capacity} cannot hold the {size} stored episodes "
                             "(a smaller buffer would silently drop the oldest)")
        oldest_first = (int(self.insert_at) - size + jnp.arange(size)) % self.capacity

        def fit(x):
            return jnp.concatenate([x[oldest_first], jnp.zeros((capacity - size, *x.shape[1:]), x.dtype)])

        rings = {f.name: fit(getattr(self, f.name)) for f in dataclasses.fields(self)
                 if f.name not in ("size", "insert_at")}
        return self.replace(**rings, size=jnp.int32(size), insert_at=jnp.int32(size % capacity))


class EpisodeBuffer(_EpisodeRing, struct.PyTreeNode):
    observations: jax.Array  # [E, T + 1, *obs_shape]
    actions: jax.Array       # [E, T, A]
    size: jax.Array          # number of stored episodes (<= E), int32 scalar
    insert_at: jax.Array     # ring-buffer position of the next episode, int32 scalar

    @classmethod
    def create(cls, capacity: int, horizon: int, obs_shape: int | tuple[int, ...], action_dim: int,
               dtype=jnp.float32) -> "EpisodeBuffer":
        """An empty buffer; ``dtype`` is the observations' (e.g. ``jnp.uint8`` for images)."""
        obs_shape = _checked_sizes("EpisodeBuffer.create", obs_shape, capacity=capacity, horizon=horizon,
                                   action_dim=action_dim)
        return cls(observations=jnp.zeros((capacity, horizon + 1, *obs_shape), dtype),
                   actions=jnp.zeros((capacity, horizon, action_dim), jnp.float32),
                   size=jnp.zeros((), jnp.int32), insert_at=jnp.zeros((), jnp.int32))

    @property
    def horizon(self) -> int:
        return self.actions.shape[1]

    def add(self, observations: jax.Array, actions: jax.Array) -> "EpisodeBuffer":
        """Append a batch of episodes ``[B, T + 1, *obs_shape]`` / ``[B, T, A]`` (oldest overwritten when
        full)."""
        if observations.ndim != self.observations.ndim or observations.shape[1:] != self.observations.shape[1:]:
            raise ValueError(f"observations must have shape [B, {', '.join(map(str, self.observations.shape[1:]))}]"
                             f", got {observations.shape}")
        if actions.shape != (observations.shape[0], *self.actions.shape[1:]):
            raise ValueError(f"actions must have shape [{observations.shape[0]}, {self.horizon}, "
                             f"{self.actions.shape[2]}], got {actions.shape}")
        if observations.shape[0] > self.capacity:
            raise ValueError(f"cannot add {observations.shape[0]} episodes to a buffer of capacity "
                             f"{self.capacity}")
        rows = (self.insert_at + jnp.arange(observations.shape[0])) % self.capacity
        return self.replace(
            observations=self.observations.at[rows].set(observations.astype(self.observations.dtype)),
            actions=self.actions.at[rows].set(actions.astype(self.actions.dtype)),
            size=jnp.minimum(self.size + observations.shape[0], self.capacity),
            insert_at=(self.insert_at + observations.shape[0]) % self.capacity)

    def sample_states(self, key: jax.Array, count: int) -> jax.Array:
        """``count`` stored states ``[count, *obs_shape]``, uniform over the stored episodes' steps (with
        replacement): e.g. the waypoints of a policy that plans over the replay buffer
        (:class:`~platonic_rl.agents.qrl_policies.PolicySpec`). An empty buffer gives zeros (check ``size``)."""
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"EpisodeBuffer.sample_states: count must be an int >= 1, got {count!r}")
        episode_key, t_key = jax.random.split(key)
        episode = jax.random.randint(episode_key, (count,), 0, jnp.maximum(self.size, 1))
        t = jax.random.randint(t_key, (count,), 0, self.horizon + 1)
        return self.observations[episode, t]

    def sample(self, key: jax.Array, batch_size: int, p_future: float = 1.0, discount: float = 0.99
               ) -> dict[str, jax.Array]:
        """``batch_size`` transitions with relabelled goal states; see the module docstring.

        Returns observations, actions, next_observations, goals (states), goal_offsets (k, or -1 for a
        random goal) and episode/step indices. Sampling an empty buffer returns zeros (check ``size``).
        """
        if batch_size < 1 or not 0.0 <= p_future <= 1.0 or not 0.0 < discount < 1.0:
            raise ValueError(f"EpisodeBuffer.sample: need batch_size >= 1, p_future in [0, 1] and discount in "
                             f"(0, 1); got {batch_size}, {p_future}, {discount}")
        t_max = self.horizon
        ep_key, t_key, k_key, mix_key, rand_ep_key, rand_t_key = jax.random.split(key, 6)
        size = jnp.maximum(self.size, 1)
        episode = jax.random.randint(ep_key, (batch_size,), 0, size)
        t = jax.random.randint(t_key, (batch_size,), 0, t_max)
        k = truncated_geometric(k_key, t_max - t, discount)  # on {0, ..., T - t}
        use_future = jax.random.uniform(mix_key, (batch_size,)) < p_future
        random_episode = jax.random.randint(rand_ep_key, (batch_size,), 0, size)
        random_t = jax.random.randint(rand_t_key, (batch_size,), 0, t_max + 1)
        goal_episode = jnp.where(use_future, episode, random_episode)
        goal_t = jnp.where(use_future, t + k, random_t)
        return dict(observations=self.observations[episode, t],
                    actions=self.actions[episode, t],
                    next_observations=self.observations[episode, t + 1],
                    goals=self.observations[goal_episode, goal_t],
                    goal_offsets=jnp.where(use_future, k, -1),
                    episode=episode, step=t)


class SequenceBuffer(_EpisodeRing, struct.PyTreeNode):
    """Whole fixed-length episodes for world-model learning, sampled as contiguous chunks (a pytree).

    Layout (L = episode length + 1 observations): ``observations [E, L, *obs_shape]``, ``prev_actions
    [E, L, A]`` (the action that led to each observation; zero at the first) and ``rewards [E, L]``
    (received on arriving at each observation; zero at the first).
    """

    observations: jax.Array
    prev_actions: jax.Array
    rewards: jax.Array
    size: jax.Array
    insert_at: jax.Array

    @classmethod
    def create(cls, capacity: int, length: int, obs_shape: int | tuple[int, ...], action_dim: int,
               dtype=jnp.float32) -> "SequenceBuffer":
        obs_shape = _checked_sizes("SequenceBuffer.create", obs_shape, capacity=capacity, length=length,
                                   action_dim=action_dim)
        return cls(observations=jnp.zeros((capacity, length, *obs_shape), dtype),
                   prev_actions=jnp.zeros((capacity, length, action_dim), jnp.float32),
                   rewards=jnp.zeros((capacity, length), jnp.float32),
                   size=jnp.zeros((), jnp.int32), insert_at=jnp.zeros((), jnp.int32))

    def add(self, observations, prev_actions, rewards) -> "SequenceBuffer":
        """Append one episode ``[L, ...]`` (the oldest is overwritten when full)."""
        expected = dict(observations=self.observations.shape[1:], prev_actions=self.prev_actions.shape[1:],
                        rewards=self.rewards.shape[1:])
        for name, value in (("observations", observations), ("prev_actions", prev_actions), ("rewards", rewards)):
            if tuple(value.shape) != expected[name]:
                raise ValueError(f"SequenceBuffer.add: {name} must have shape {expected[name]}, got {value.shape}")
        i = self.insert_at
        return self.replace(observations=self.observations.at[i].set(observations.astype(self.observations.dtype)),
                            prev_actions=self.prev_actions.at[i].set(prev_actions),
                            rewards=self.rewards.at[i].set(rewards),
                            size=jnp.minimum(self.size + 1, self.capacity),
                            insert_at=(i + 1) % self.capacity)

    def sample(self, key: jax.Array, batch_size: int, chunk: int) -> dict[str, jax.Array]:
        """``batch_size`` chunks of ``chunk`` consecutive steps from uniformly chosen stored episodes."""
        length = self.observations.shape[1]
        if batch_size < 1 or not 1 <= chunk <= length:
            raise ValueError(f"SequenceBuffer.sample: need batch_size >= 1 and 1 <= chunk <= {length}, got "
                             f"{batch_size}, {chunk}")
        ep_key, t_key = jax.random.split(key)
        episode = jax.random.randint(ep_key, (batch_size,), 0, jnp.maximum(self.size, 1))
        start = jax.random.randint(t_key, (batch_size,), 0, length - chunk + 1)
        steps = start[:, None] + jnp.arange(chunk)
        return dict(observations=self.observations[episode[:, None], steps],
                    prev_actions=self.prev_actions[episode[:, None], steps],
                    rewards=self.rewards[episode[:, None], steps], episode=episode, start=start)


# ------------------------------------------------------------------------------------------ samplers
# What a training loop hands to ``training.updates.update_steps``: a pytree holding the data, whose
# ``sample(key)`` returns one batch in the keys the agents read. Goal relabelling, goal masking and the
# rewards of goal-conditioned batches are decided here, and only here.


class DatasetSampler(struct.PyTreeNode):
    """Rows drawn uniformly with replacement from a dict of arrays with a common leading dimension (an
    offline dataset); the batch holds every key of ``data``."""

    data: dict
    batch_size: int = struct.field(pytree_node=False)

    def sample(self, key: jax.Array) -> dict[str, jax.Array]:
        n = jax.tree_util.tree_leaves(self.data)[0].shape[0]
        rows = jax.random.randint(key, (self.batch_size,), 0, n)
        return jax.tree_util.tree_map(lambda x: x[rows], self.data)


class GoalSampler(struct.PyTreeNode):
    """Goal-conditioned batches from an :class:`EpisodeBuffer`: observations, actions, next_observations,
    goals (future states with P(k) ~ discount^k with probability ``p_future``, else random stored states;
    multiplied by ``goal_mask`` where given, which zeroes the dimensions a goal does not specify) and
    rewards (-1 per step: every transition costs one step until the goal)."""

    buffer: EpisodeBuffer
    goal_mask: jax.Array | None
    batch_size: int = struct.field(pytree_node=False)
    p_future: float = struct.field(pytree_node=False, default=1.0)
    discount: float = struct.field(pytree_node=False, default=0.99)

    def sample(self, key: jax.Array) -> dict[str, jax.Array]:
        s = self.buffer.sample(key, self.batch_size, self.p_future, self.discount)
        goals = s["goals"] if self.goal_mask is None else s["goals"] * self.goal_mask
        return dict(observations=s["observations"], actions=s["actions"], next_observations=s["next_observations"],
                    goals=goals, rewards=-jnp.ones(self.batch_size, jnp.float32))


class SequenceSampler(struct.PyTreeNode):
    """World-model batches from a :class:`SequenceBuffer`: ``batch_size`` chunks of ``chunk`` steps of
    observations, prev_actions and rewards."""

    buffer: SequenceBuffer
    batch_size: int = struct.field(pytree_node=False)
    chunk: int = struct.field(pytree_node=False)

    def sample(self, key: jax.Array) -> dict[str, jax.Array]:
        s = self.buffer.sample(key, self.batch_size, self.chunk)
        return dict(observations=s["observations"], prev_actions=s["prev_actions"], rewards=s["rewards"])


class SegmentGoalSampler(struct.PyTreeNode):
    """Goal-conditioned batches from an offline dataset of variable-length episodes stored flat (e.g.
    ``envs.maze2d.load_dataset``): ``data`` holds observations, actions, next_observations ``[N, ...]`` and
    ``segment_end [N]`` (True at each episode's last transition; consecutive rows of an episode are
    consecutive steps). Transitions are drawn uniformly; with each:

    * ``goals``: with probability ``p_future`` a future state of the same episode, with probability ``p_current``
      the transition's own state (reached: ``rewards`` 0 and ``masks`` 0 there, -1 and 1 elsewhere; the batch has
      ``masks`` only when ``p_current`` > 0), else the next state of a uniformly random transition (appendix C.3's
      p_goal; OGBench's value goals are p_current 0.2, p_future 0.5 with ``future="geometric"``);
    * ``subgoals`` (if ``subgoal_steps`` k): the state k steps ahead, or the episode's last if that is nearer, and with
      ``bc_goals`` also ``bc_subgoals``: the state k steps ahead or the ``bc_goals`` state if that is nearer (HIQL's
      low-level goals and high-level targets);
    * ``bc_goals`` (if ``bc_goals``): a future state, for behaviour cloning towards where the data went; with
      probability ``bc_p_random`` instead the next state of a uniformly random transition (OGBench's
      ``actor_p_randomgoal``, 0.5 on its stitch datasets), whose ``bc_subgoals`` is then the state k steps ahead.

    A future state is the next state of transition t + k, k in {0, ..., end - t}: with ``future="geometric"`` P(k)
    is proportional to ``discount``^k, Delta t = k + 1 >= 1 steps ahead, Geometric(1 - discount) truncated at the
    episode's end (C.3.2; OGBench's value goals); with ``future="uniform"`` k is uniform, any later state of the
    episode alike (OGBench's actor goals). ``bc_future`` chooses the same for ``bc_goals``. ``rewards`` are -1 (each
    transition costs one step)."""

    data: dict
    last_index: jax.Array  # [N] the index of the last transition of each row's episode
    batch_size: int = struct.field(pytree_node=False)
    p_future: float = struct.field(pytree_node=False, default=1.0)
    discount: float = struct.field(pytree_node=False, default=0.99)
    bc_goals: bool = struct.field(pytree_node=False, default=False)
    future: str = struct.field(pytree_node=False, default="geometric")
    bc_future: str = struct.field(pytree_node=False, default="geometric")
    p_current: float = struct.field(pytree_node=False, default=0.0)
    subgoal_steps: int | None = struct.field(pytree_node=False, default=None)
    bc_p_random: float = struct.field(pytree_node=False, default=0.0)

    @classmethod
    def create(cls, data: dict, batch_size: int, p_future: float = 1.0, discount: float = 0.99,
               bc_goals: bool = False, future: str = "geometric", bc_future: str = "geometric",
               p_current: float = 0.0, subgoal_steps: int | None = None, bc_p_random: float = 0.0
               ) -> "SegmentGoalSampler":
        import numpy as np

        missing = [k for k in ("observations", "actions", "next_observations", "segment_end") if k not in data]
        if missing:
            raise ValueError(f"SegmentGoalSampler: data lacks {missing}")
        if not (isinstance(batch_size, int) and batch_size >= 1 and 0.0 <= p_future <= 1.0 and 0.0 < discount < 1.0):
            raise ValueError(f"SegmentGoalSampler: need batch_size >= 1, p_future in [0, 1], discount in (0, 1); got "
                             f"{batch_size}, {p_future}, {discount}")
        if not 0.0 <= p_current <= 1.0 - p_future:
            raise ValueError(f"SegmentGoalSampler: p_current must be in [0, 1 - p_future] = [0, {1.0 - p_future:g}] (the "
                             f"rest of the goals are random states), got {p_current}")
        if subgoal_steps is not None and not (isinstance(subgoal_steps, int) and subgoal_steps >= 1):
            raise ValueError(f"SegmentGoalSampler: subgoal_steps must be an int >= 1 or None, got {subgoal_steps!r}")
        if not 0.0 <= bc_p_random <= 1.0 or (bc_p_random > 0 and not bc_goals):
            raise ValueError(f"SegmentGoalSampler: bc_p_random must be in [0, 1], and above 0 only with bc_goals=True; "
                             f"got {bc_p_random} with bc_goals={bc_goals}")
        for name, value in (("future", future), ("bc_future", bc_future)):
            if value not in ("geometric", "uniform"):
                raise ValueError(f"SegmentGoalSampler: {name} must be 'geometric' or 'uniform', got {value!r}")
        ends = np.asarray(data["segment_end"], bool)
        if not ends[-1]:
            raise ValueError("SegmentGoalSampler: data['segment_end'][-1] must be True (the last episode ends there)")
        end_rows = np.flatnonzero(ends)
        last_index = end_rows[np.searchsorted(end_rows, np.arange(len(ends)))]
        keys = ("observations", "actions", "next_observations")
        return cls(data={k: jnp.asarray(data[k], jnp.float32) for k in keys}, last_index=jnp.asarray(last_index, jnp.int32),
                   batch_size=batch_size, p_future=p_future, discount=discount, bc_goals=bc_goals, future=future,
                   bc_future=bc_future, p_current=p_current, subgoal_steps=subgoal_steps, bc_p_random=bc_p_random)

    def _future(self, key, rows, how: str):
        max_k = self.last_index[rows] - rows
        if how == "uniform":
            return rows + jax.random.randint(key, rows.shape, 0, max_k + 1)
        return rows + truncated_geometric(key, max_k, self.discount)

    def sample(self, key: jax.Array) -> dict[str, jax.Array]:
        n = self.last_index.shape[0]
        row_key, future_key, bc_key, mix_key, random_key = jax.random.split(key, 5)
        rows = jax.random.randint(row_key, (self.batch_size,), 0, n)
        mix = jax.random.uniform(mix_key, (self.batch_size,))
        use_future = mix < self.p_future
        goal_rows = jnp.where(use_future, self._future(future_key, rows, self.future),
                              jax.random.randint(random_key, (self.batch_size,), 0, n))
        next_obs = self.data["next_observations"]
        batch = dict(observations=self.data["observations"][rows], actions=self.data["actions"][rows],
                     next_observations=next_obs[rows], goals=next_obs[goal_rows],
                     rewards=-jnp.ones(self.batch_size, jnp.float32))
        if self.p_current > 0:  # the transition's own state: reached where it starts
            current = ~use_future & (mix < self.p_future + self.p_current)
            mask = current.reshape(current.shape + (1,) * (batch["goals"].ndim - 1))
            batch.update(goals=jnp.where(mask, batch["observations"], batch["goals"]),
                         rewards=jnp.where(current, 0.0, -1.0), masks=jnp.where(current, 0.0, 1.0))
        random_bc = jnp.zeros(self.batch_size, bool)
        if self.bc_goals:
            bc_rows = self._future(bc_key, rows, self.bc_future)
            if self.bc_p_random > 0:  # a key of its own: the other draws stay as they are without random bc goals
                pick_key, random_bc_key = jax.random.split(jax.random.fold_in(bc_key, 1))
                random_bc = jax.random.uniform(pick_key, (self.batch_size,)) < self.bc_p_random
                bc_rows = jnp.where(random_bc, jax.random.randint(random_bc_key, (self.batch_size,), 0, n), bc_rows)
            batch["bc_goals"] = next_obs[bc_rows]
        if self.subgoal_steps is not None:  # the state k steps ahead, at most the episode's last (or the bc goal)
            ahead = jnp.minimum(rows + self.subgoal_steps - 1, self.last_index[rows])
            batch["subgoals"] = next_obs[ahead]
            if self.bc_goals:
                batch["bc_subgoals"] = next_obs[jnp.where(random_bc, ahead, jnp.minimum(ahead, bc_rows))]
        return batch


class PerSeed(struct.PyTreeNode):
    """``num_seeds`` independent batches of ``sampler`` stacked on a leading axis (for
    :class:`~platonic_rl.agents.seeds.SeedStack`)."""

    sampler: Any
    num_seeds: int = struct.field(pytree_node=False)

    def sample(self, key: jax.Array) -> dict[str, jax.Array]:
        return jax.vmap(self.sampler.sample)(jax.random.split(key, self.num_seeds))
