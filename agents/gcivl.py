"""Goal-conditioned implicit V-learning (GCIVL), as a jit-able pytree agent: OGBench's value-only variant of
goal-conditioned IQL (Park et al. 2024, "OGBench: Benchmarking Offline Goal-Conditioned RL"; IQL: Kostrikov et al.
2022; goal-conditioned value learning as in HIQL, Park et al. 2023), a baseline beside QRL on OGBench's mazes.

    config = GCIVLConfig(obs_dim=2, action_dim=2)
    agent = GCIVLAgent.create(config, seed=0)
    sampler = SegmentGoalSampler.create(data, 1024, p_future=0.5, p_current=0.2, bc_goals=True, bc_future="uniform")
    agent, metrics = jax.jit(GCIVLAgent.update)(agent, sampler.sample(key))
    actions = agent.act(observations, goals)                 # the actor's mode, clipped to [-1, 1]

Value: two goal-conditioned value networks V_1, V_2 (MLPs with layer norm) and their Polyak-averaged targets.
With the reward r = 0 where the goal is the state itself (mask m = 0, reached) and -1 elsewhere (m = 1),
:func:`gcivl_value_loss` fits each V_i by the expectile loss towards r + gamma m V_i^target(s', g), weighting by
the sign of the target networks' advantage (mean over i). Actor: a Gaussian of constant standard deviation 1 by
advantage-weighted regression (:func:`awr_actor_loss`) with the advantage V(s', g) - V(s, g) of the current value
networks (mean over i, no gradient). Value goals are ``batch["goals"]`` (OGBench's: 20% the state, 50% a future
state drawn geometrically, 30% random; ``SegmentGoalSampler``'s ``p_current=0.2, p_future=0.5``), the actor's
``batch["bc_goals"]`` where given (OGBench's: a future state drawn uniformly), else the value goals. Defaults are
OGBench's ``gcivl.py`` (lr 3e-4, 3 x 512 GELU layers, layer norm, gamma 0.99, tau 0.005, expectile 0.9, AWR
temperature 10, weights clipped at 100). Written from its formulation: the networks are Flax modules of this file
(OGBench initialises kernels by fan-average uniform scaling; here Flax's default, lecun normal, except the actor's
mean layer, scaled by 0.01 as OGBench's).
"""
from __future__ import annotations

import dataclasses
import functools
import math

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.train_state import TrainState, polyak_update


@dataclasses.dataclass(frozen=True)
class GCIVLConfig:
    obs_dim: int = 2                                   # state size (a goal is a state of the same size)
    action_dim: int = 2                                # continuous actions in [-1, 1]^action_dim
    value_hidden: tuple[int, ...] = (512, 512, 512)    # each value network's hidden widths (GELU, layer norm)
    actor_hidden: tuple[int, ...] = (512, 512, 512)    # the actor's hidden widths (GELU, layer norm)
    layer_norm: bool = True                            # layer norm after each hidden layer's activation
    learning_rate: float = 3e-4                        # Adam's, for the value networks and the actor
    discount: float = 0.99                             # gamma of the value target r + gamma m V(s', g)
    tau: float = 0.005                                 # the target networks move this fraction per update
    expectile: float = 0.9                             # the value loss's expectile (0.5: a mean, towards 1: a max)
    awr_temperature: float = 10.0                      # AWR's alpha: weights exp(alpha A), clipped at max_weight
    max_weight: float = 100.0                          # the largest AWR weight
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim"), open_unit=("discount", "expectile"))
        compute_dtype(self)  # a known compute_dtype
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"GCIVLConfig.tau must be in (0, 1], got {self.tau}")
        if not (math.isfinite(self.awr_temperature) and self.awr_temperature >= 0 and self.max_weight > 0):
            raise ValueError(f"GCIVLConfig: awr_temperature must be finite and >= 0 and max_weight > 0, got "
                             f"{self.awr_temperature}, {self.max_weight}")


# ------------------------------------------------------------------------------------------------ networks


class LayerNormMLP(nn.Module):
    """Dense layers of widths ``hidden``, each followed by GELU and (``layer_norm``) layer normalisation, then a linear
    ``out_dim`` output in float32 (its kernel Flax's default, or fan-average uniform scaled by ``out_scale``)."""
    hidden: tuple[int, ...]
    out_dim: int
    layer_norm: bool = True
    dtype: object = None
    out_scale: float | None = None

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = nn.gelu(nn.Dense(width, dtype=self.dtype)(x))
            if self.layer_norm:
                x = nn.LayerNorm(dtype=self.dtype)(x)
        init = {} if self.out_scale is None else dict(
            kernel_init=nn.initializers.variance_scaling(self.out_scale, "fan_avg", "uniform"))
        return nn.Dense(self.out_dim, dtype=self.dtype, **init)(x).astype(jnp.float32)


class GoalValues(nn.Module):
    """Two value networks V_i(s, g) (their own parameters) on the concatenation [s; g]: ``[2, B]`` (HIQL passes a
    subgoal representation as g)."""
    hidden: tuple[int, ...]
    layer_norm: bool = True
    dtype: object = None

    @nn.compact
    def __call__(self, observations, goals):
        two = nn.vmap(LayerNormMLP, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                      axis_size=2)
        return two(self.hidden, 1, self.layer_norm, self.dtype)(jnp.concatenate([observations, goals], -1))[..., 0]


class GaussianActor(nn.Module):
    """The mean of pi(a | s, g), a Gaussian of standard deviation 1 (OGBench's ``const_std``)."""
    hidden: tuple[int, ...]
    action_dim: int
    layer_norm: bool = True
    dtype: object = None

    @nn.compact
    def __call__(self, observations, goals):
        return LayerNormMLP(self.hidden, self.action_dim, self.layer_norm, self.dtype, out_scale=1e-2)(
            jnp.concatenate([observations, goals], -1))


def gaussian_log_prob(mean: jax.Array, actions: jax.Array) -> jax.Array:
    """log N(actions; mean, I), summed over the action dimensions: ``[B]``."""
    return -0.5 * jnp.sum(jnp.square(actions - mean), -1) - 0.5 * mean.shape[-1] * jnp.log(2 * jnp.pi)


# -------------------------------------------------------------------------------------------------- losses


def expectile_loss(advantage: jax.Array, difference: jax.Array, expectile: float) -> jax.Array:
    """|tau - 1(A < 0)| d^2 elementwise (IQL's L_2^tau), with the weight's sign from ``advantage`` A and the
    squared term from ``difference`` d (GCIVL takes them from the target and the current networks)."""
    return jnp.where(advantage >= 0, expectile, 1.0 - expectile) * jnp.square(difference)


def gcivl_value_loss(values: jax.Array, target_values: jax.Array, next_target_values: jax.Array,
                     rewards: jax.Array, masks: jax.Array, discount: float, expectile: float
                     ) -> tuple[jax.Array, dict]:
    """sum_i E[L_2^tau(A, y_i - V_i(s, g))] with y_i = r + gamma m V_i^target(s', g) and
    A = r + gamma m min_j V_j^target(s', g) - mean_j V_j^target(s, g). ``values``, ``target_values``,
    ``next_target_values``: ``[2, B]``; ``rewards``, ``masks``: ``[B]``."""
    advantage = rewards + discount * masks * next_target_values.min(0) - target_values.mean(0)
    targets = rewards + discount * masks * next_target_values
    loss = jnp.sum(jnp.mean(expectile_loss(advantage, targets - values, expectile), -1))
    return loss, dict(value_loss=loss, v_mean=values.mean(), v_min=values.min(), v_max=values.max())


def awr_actor_loss(log_probs: jax.Array, values: jax.Array, next_values: jax.Array, temperature: float,
                   max_weight: float) -> tuple[jax.Array, dict]:
    """-E[min(exp(alpha A), w_max) log pi(a | s, g)] with A = mean_i V_i(s', g) - mean_i V_i(s, g) (no gradient to
    the values). ``log_probs``: ``[B]``; ``values``, ``next_values``: ``[2, B]``."""
    advantage = jax.lax.stop_gradient(next_values.mean(0) - values.mean(0))
    weights = jnp.minimum(jnp.exp(temperature * advantage), max_weight)
    loss = -jnp.mean(weights * log_probs)
    return loss, dict(actor_loss=loss, advantage=advantage.mean(), bc_log_prob=log_probs.mean())


# --------------------------------------------------------------------------------------------------- agent


@functools.cache  # equal configs, the same optimizer object (see platonic_rl.common.train_state)
def _optimizer(config: GCIVLConfig) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


class GCIVLAgent(StatelessPolicy, flax.struct.PyTreeNode):
    value_state: TrainState      # the two value networks' parameters and their optimizer
    target_value_params: dict    # their Polyak-averaged copies
    actor_state: TrainState      # the actor's parameters and its optimizer
    config: GCIVLConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: GCIVLConfig, seed: int | jax.Array = 0) -> "GCIVLAgent":
        value_key, actor_key = jax.random.split(as_key(seed))
        zeros = jnp.zeros((1, config.obs_dim))
        values = _values(config).init(value_key, zeros, zeros)
        actor = _actor(config).init(actor_key, zeros, zeros)
        return cls(value_state=TrainState.create(values, _optimizer(config)), target_value_params=values,
                   actor_state=TrainState.create(actor, _optimizer(config)), config=config)

    def values(self, observations, goals, params=None) -> jax.Array:
        """V_i(s, g) of both value networks: ``[2, B]``."""
        return _values(self.config).apply(self.value_state.params if params is None else params, observations, goals)

    def update(self, batch) -> tuple["GCIVLAgent", dict[str, jax.Array]]:
        """One step of the value networks and the actor, then the targets (pure, jit-able). ``batch``:
        observations, actions, next_observations, goals (the value's), rewards; masks (default 1) and bc_goals
        (the actor's goals; default the value's) if given."""
        c = self.config
        batch, rewards, masks, actor_goals = goal_batch(batch, c.obs_dim, c.action_dim, "GCIVL")
        observations, next_observations = batch["observations"], batch["next_observations"]

        target = _values(c).apply(self.target_value_params, observations, batch["goals"])
        next_target = _values(c).apply(self.target_value_params, next_observations, batch["goals"])

        def value_loss(params):
            return gcivl_value_loss(self.values(observations, batch["goals"], params), target, next_target, rewards,
                                    masks, c.discount, c.expectile)

        def actor_loss(params):
            mean = _actor(c).apply(params, observations, actor_goals)
            loss, metrics = awr_actor_loss(gaussian_log_prob(mean, batch["actions"]),
                                           self.values(observations, actor_goals),
                                           self.values(next_observations, actor_goals), c.awr_temperature,
                                           c.max_weight)
            return loss, dict(metrics, action_mse=jnp.mean(jnp.square(mean - batch["actions"])))

        value_grads, value_metrics = jax.grad(value_loss, has_aux=True)(self.value_state.params)
        actor_grads, actor_metrics = jax.grad(actor_loss, has_aux=True)(self.actor_state.params)
        value_state = self.value_state.apply_gradients(value_grads)
        return self.replace(value_state=value_state, actor_state=self.actor_state.apply_gradients(actor_grads),
                            target_value_params=polyak_update(self.target_value_params, value_state.params, c.tau)
                            ), {**value_metrics, **actor_metrics}

    def act(self, observations, goals, rng=None):
        """A sample of pi(. | s, g) if ``rng`` (a PRNG key or an int seed) is given, else its mode; clipped to
        [-1, 1]^A."""
        return gaussian_actions(_actor(self.config), self.actor_state.params, observations, goals, rng)


def _values(config: GCIVLConfig) -> GoalValues:
    return GoalValues(config.value_hidden, config.layer_norm, compute_dtype(config))


def _actor(config: GCIVLConfig) -> GaussianActor:
    return GaussianActor(config.actor_hidden, config.action_dim, config.layer_norm, compute_dtype(config))


def goal_batch(batch, obs_dim: int, action_dim: int, agent: str) -> tuple[dict, jax.Array, jax.Array, jax.Array]:
    """An offline goal-conditioned batch checked and read as GCIVL and GCIQL read it: ``(batch, rewards [B], masks [B]
    (default 1), actor goals (bc_goals, default the value's goals))``; a missing or misshapen entry is refused naming it
    and ``agent``."""
    batch = as_batch(batch, ("observations", "actions", "next_observations", "goals", "rewards", "masks", "bc_goals"))
    for key, dim in (("observations", obs_dim), ("next_observations", obs_dim), ("goals", obs_dim),
                     ("actions", action_dim)):
        if key not in batch or batch[key].ndim != 2 or batch[key].shape[-1] != dim:
            raise ValueError(f"batch[{key!r}] must have shape [B, {dim}]"
                             + (f", got {batch[key].shape}" if key in batch else " (missing)"))
    if "rewards" not in batch:
        raise ValueError(f"batch['rewards'] is missing: {agent} needs -1 per step and 0 where the goal is reached")
    rewards = batch["rewards"].reshape(-1)
    masks = batch["masks"].reshape(-1) if "masks" in batch else jnp.ones_like(rewards)
    return batch, rewards, masks, batch.get("bc_goals", batch["goals"])


def gaussian_actions(actor: GaussianActor, params, observations, goals, rng=None) -> jax.Array:
    """The actor's mode, or with ``rng`` (a PRNG key or an int seed) a sample of its unit Gaussian; clipped to
    [-1, 1]^A."""
    observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
    mean = actor.apply(params, observations, goals)
    if rng is not None:
        mean = mean + jax.random.normal(as_key(rng), mean.shape)
    return jnp.clip(mean, -1.0, 1.0)
