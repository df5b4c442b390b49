"""Hierarchical implicit Q-learning (HIQL; Park et al. 2023, "HIQL: Offline Goal-Conditioned RL with Latent States
as Actions"), as OGBench sets it up (Park et al. 2024), a jit-able pytree agent: the strongest non-QRL baseline on
OGBench's navigate mazes.

    config = HIQLConfig(obs_dim=2, action_dim=2)
    agent = HIQLAgent.create(config, seed=0)
    sampler = SegmentGoalSampler.create(data, 1024, p_future=0.5, p_current=0.2, bc_goals=True, bc_future="uniform",
                                        subgoal_steps=25)
    agent, metrics = jax.jit(HIQLAgent.update)(agent, sampler.sample(key))
    actions = agent.act(observations, goals)     # the high actor's subgoal representation, then the low actor's mode

One value function, two policies:

* a subgoal representation phi([s; g]) in R^d (an MLP, length-normalised to sqrt(d)), trained only through the
  value V_i(s, g) = MLP_i([s; phi([s; g])]) (two networks, the representation shared), fit as GCIVL's
  (:func:`~platonic_rl.agents.gcivl.gcivl_value_loss`, expectile 0.7); the target networks average the MLPs' parameters
  and read the current representation;
* a low actor pi_l(a | s, phi([s; w])) towards the state w ``subgoal_steps`` ahead (``batch["subgoals"]``), by AWR
  with A = V(s', w) - V(s, w) (the representation gets no gradient from it);
* a high actor pi_h(z | s, g), a Gaussian over representations, regressed by AWR onto phi([s; w]) for w the state
  ``subgoal_steps`` ahead or the goal if nearer (``batch["bc_subgoals"]``), goals g a uniform future state
  (``batch["bc_goals"]``), with A = V(w, g) - V(s, g).

Both actors are Gaussians of standard deviation 1 (OGBench's ``const_std``); acting takes the modes. Defaults are
OGBench's ``hiql.py`` (lr 3e-4, 3 x 512 GELU layers with layer norm, gamma 0.99, tau 0.005, expectile 0.7, both AWR
temperatures 3, 25 subgoal steps, d = 10). Written from the formulation; the layers and losses are
:mod:`~platonic_rl.agents.gcivl`'s.
"""
from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.agents.gcivl import (GaussianActor, GoalValues, LayerNormMLP, awr_actor_loss, gaussian_log_prob,
                                      gcivl_value_loss)
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.train_state import TrainState, polyak_update


@dataclasses.dataclass(frozen=True)
class HIQLConfig:
    obs_dim: int = 2                                   # state size (a goal is a state of the same size)
    action_dim: int = 2                                # continuous actions in [-1, 1]^action_dim
    value_hidden: tuple[int, ...] = (512, 512, 512)    # hidden widths of phi and of each value MLP (GELU, layer norm)
    actor_hidden: tuple[int, ...] = (512, 512, 512)    # hidden widths of both actors (GELU, layer norm)
    rep_dim: int = 10                                  # d: the subgoal representation's size
    layer_norm: bool = True                            # layer norm after each hidden layer's activation
    learning_rate: float = 3e-4                        # Adam's, for every network
    discount: float = 0.99                             # gamma of the value target r + gamma m V(s', g)
    tau: float = 0.005                                 # the target value MLPs move this fraction per update
    expectile: float = 0.7                             # the value loss's expectile
    low_temperature: float = 3.0                       # the low actor's AWR alpha
    high_temperature: float = 3.0                      # the high actor's AWR alpha
    max_weight: float = 100.0                          # the largest AWR weight
    subgoal_steps: int = 25                            # k: how far ahead the low actor's goals are (the sampler's)
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim", "rep_dim", "subgoal_steps"),
                     open_unit=("discount", "expectile"))
        compute_dtype(self)  # a known compute_dtype
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"HIQLConfig.tau must be in (0, 1], got {self.tau}")
        if min(self.low_temperature, self.high_temperature) < 0 or self.max_weight <= 0:
            raise ValueError("HIQLConfig: the AWR temperatures must be >= 0 and max_weight > 0, got "
                             f"{self.low_temperature}, {self.high_temperature}, {self.max_weight}")


# ------------------------------------------------------------------------------------------------ networks


class SubgoalRep(nn.Module):
    """phi([s; g]): an MLP to ``rep_dim``, length-normalised to sqrt(rep_dim)."""
    hidden: tuple[int, ...]
    rep_dim: int
    layer_norm: bool = True
    dtype: object = None

    @nn.compact
    def __call__(self, observations, goals):
        return normalise(LayerNormMLP(self.hidden, self.rep_dim, self.layer_norm, self.dtype)(
            jnp.concatenate([observations, goals], -1)))


def normalise(z: jax.Array) -> jax.Array:
    """z / |z| x sqrt(d): the representations' length (0 for z = 0, as from an all-zero input through bias-free
    layers, where z / |z| and its gradient would be NaN)."""
    return z * jax.lax.rsqrt(jnp.sum(jnp.square(z), -1, keepdims=True) + 1e-12) * jnp.sqrt(z.shape[-1])


# --------------------------------------------------------------------------------------------------- agent


@functools.cache  # equal configs, the same optimizer object (see platonic_rl.common.train_state)
def _optimizer(config: HIQLConfig) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


class HIQLAgent(StatelessPolicy, flax.struct.PyTreeNode):
    value_state: TrainState      # {"rep": phi's parameters, "values": the two value MLPs'} and their optimizer
    target_value_params: dict    # the value MLPs' Polyak-averaged copies (phi is read current)
    low_actor_state: TrainState  # pi_l's parameters and optimizer
    high_actor_state: TrainState  # pi_h's parameters and optimizer
    config: HIQLConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: HIQLConfig, seed: int | jax.Array = 0) -> "HIQLAgent":
        rep_key, value_key, low_key, high_key = jax.random.split(as_key(seed), 4)
        states, reps = jnp.zeros((1, config.obs_dim)), jnp.zeros((1, config.rep_dim))
        value = dict(rep=_rep(config).init(rep_key, states, states), values=_values(config).init(value_key, states, reps))
        low = _actor(config, config.action_dim).init(low_key, states, reps)
        high = _actor(config, config.rep_dim).init(high_key, states, states)
        return cls(value_state=TrainState.create(value, _optimizer(config)), target_value_params=value["values"],
                   low_actor_state=TrainState.create(low, _optimizer(config)),
                   high_actor_state=TrainState.create(high, _optimizer(config)), config=config)

    def rep(self, observations, goals, params=None) -> jax.Array:
        """phi([s; g]): ``[B, rep_dim]``."""
        params = self.value_state.params if params is None else params
        return _rep(self.config).apply(params["rep"], observations, goals)

    def values(self, observations, goals, params=None) -> jax.Array:
        """V_i(s, g) = MLP_i([s; phi([s; g])]) of both networks: ``[2, B]``."""
        params = self.value_state.params if params is None else params
        return _values(self.config).apply(params["values"], observations, self.rep(observations, goals, params))

    def subgoal(self, observations, goals) -> jax.Array:
        """The high actor's mean: the representation of the subgoal it proposes (before normalising), ``[B, d]``."""
        return _actor(self.config, self.config.rep_dim).apply(self.high_actor_state.params, observations, goals)

    def update(self, batch) -> tuple["HIQLAgent", dict[str, jax.Array]]:
        """One step of the value (and phi), both actors, then the targets (pure, jit-able). ``batch``: observations,
        actions, next_observations, goals (the value's), rewards, subgoals (the low actor's), bc_goals and
        bc_subgoals (the high actor's goals and targets); masks (default 1) if given."""
        keys = ("observations", "actions", "next_observations", "goals", "subgoals", "bc_goals", "bc_subgoals")
        batch = as_batch(batch, (*keys, "rewards", "masks"))
        c = self.config
        for key in keys:
            dim = c.action_dim if key == "actions" else c.obs_dim
            if key not in batch or batch[key].ndim != 2 or batch[key].shape[-1] != dim:
                raise ValueError(f"batch[{key!r}] must have shape [B, {dim}]"
                                 + (f", got {batch[key].shape}" if key in batch else
                                    " (missing: SegmentGoalSampler with bc_goals=True and subgoal_steps gives it)"))
        if "rewards" not in batch:
            raise ValueError("batch['rewards'] is missing: HIQL needs -1 per step and 0 where the goal is reached")
        rewards = batch["rewards"].reshape(-1)
        masks = batch["masks"].reshape(-1) if "masks" in batch else jnp.ones_like(rewards)
        s, s_next, goals = batch["observations"], batch["next_observations"], batch["goals"]

        reps_now = jax.lax.stop_gradient(self.rep(s, goals))   # the targets read phi as it is
        next_reps_now = jax.lax.stop_gradient(self.rep(s_next, goals))
        target = _values(c).apply(self.target_value_params, s, reps_now)
        next_target = _values(c).apply(self.target_value_params, s_next, next_reps_now)

        def value_loss(params):
            return gcivl_value_loss(self.values(s, goals, params), target, next_target, rewards, masks, c.discount,
                                    c.expectile)

        def low_actor_loss(params):
            w = batch["subgoals"]
            mean = _actor(c, c.action_dim).apply(params, s, jax.lax.stop_gradient(self.rep(s, w)))
            loss, metrics = awr_actor_loss(gaussian_log_prob(mean, batch["actions"]), self.values(s, w),
                                           self.values(s_next, w), c.low_temperature, c.max_weight)
            return loss, {f"low_{k}": v for k, v in metrics.items()}

        def high_actor_loss(params):
            g, w = batch["bc_goals"], batch["bc_subgoals"]
            mean = _actor(c, c.rep_dim).apply(params, s, g)
            target_rep = jax.lax.stop_gradient(self.rep(s, w))
            loss, metrics = awr_actor_loss(gaussian_log_prob(mean, target_rep), self.values(s, g), self.values(w, g),
                                           c.high_temperature, c.max_weight)
            return loss, {f"high_{k}": v for k, v in metrics.items()}

        value_grads, value_metrics = jax.grad(value_loss, has_aux=True)(self.value_state.params)
        low_grads, low_metrics = jax.grad(low_actor_loss, has_aux=True)(self.low_actor_state.params)
        high_grads, high_metrics = jax.grad(high_actor_loss, has_aux=True)(self.high_actor_state.params)
        value_state = self.value_state.apply_gradients(value_grads)
        return self.replace(
            value_state=value_state,
            target_value_params=polyak_update(self.target_value_params, value_state.params["values"], c.tau),
            low_actor_state=self.low_actor_state.apply_gradients(low_grads),
            high_actor_state=self.high_actor_state.apply_gradients(high_grads),
        ), {**value_metrics, **low_metrics, **high_metrics}

    def act(self, observations, goals, rng=None):
        """The high actor's representation (its mode, or a sample if ``rng``), length-normalised, then the low
        actor's action for it (likewise); in [-1, 1]^A."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        c = self.config
        z = self.subgoal(observations, goals)
        if rng is not None:
            high_key, low_key = jax.random.split(as_key(rng))
            z = z + jax.random.normal(high_key, z.shape)
        action = _actor(c, c.action_dim).apply(self.low_actor_state.params, observations, normalise(z))
        if rng is not None:
            action = action + jax.random.normal(low_key, action.shape)
        return jnp.clip(action, -1.0, 1.0)


def _rep(config: HIQLConfig) -> SubgoalRep:
    return SubgoalRep(config.value_hidden, config.rep_dim, config.layer_norm, compute_dtype(config))


def _values(config: HIQLConfig) -> GoalValues:
    """The two value MLPs V_i([s; z]), on a state and a representation (GCIVL's networks, z in the goal's place)."""
    return GoalValues(config.value_hidden, config.layer_norm, compute_dtype(config))


def _actor(config: HIQLConfig, out_dim: int) -> GaussianActor:
    return GaussianActor(config.actor_hidden, out_dim, config.layer_norm, compute_dtype(config))
