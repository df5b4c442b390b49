"""Goal-conditioned implicit Q-learning (GCIQL), as a jit-able pytree agent: OGBench's goal-conditioned IQL with a Q
function (Park et al. 2024, "OGBench: Benchmarking Offline Goal-Conditioned RL"; IQL: Kostrikov et al. 2022), a
baseline beside QRL on OGBench's mazes; :mod:`~platonic_rl.agents.gcivl` is its value-only sibling.

    config = GCIQLConfig(obs_dim=2, action_dim=2, bc_alpha=0.003)   # OGBench's point-maze setting
    agent = GCIQLAgent.create(config, seed=0)
    sampler = SegmentGoalSampler.create(data, 1024, p_future=0.5, p_current=0.2, bc_goals=True, bc_future="uniform")
    agent, metrics = jax.jit(GCIQLAgent.update)(agent, sampler.sample(key))
    actions = agent.act(observations, goals)                 # the actor's mode, clipped to [-1, 1]

A value network V(s, g), two critics Q_1, Q_2(s, a, g) and their Polyak-averaged targets, and a Gaussian actor of
constant standard deviation 1 (the networks of :mod:`~platonic_rl.agents.gcivl`: MLPs with GELU and layer norm).
With the reward r = 0 where the goal is the state itself (mask m = 0) and -1 elsewhere (m = 1):

- :func:`gciql_value_loss`: V by the expectile loss towards min_i Q_i^target(s, a, g) (IQL's eq. 5);
- :func:`gciql_critic_loss`: each Q_i by squared error towards r + gamma m V(s', g) (IQL's eq. 6);
- :func:`ddpg_bc_actor_loss`: DDPG+BC, -min_i Q_i(s, clip(mu(s, g)), g) over its batch mean magnitude, minus
  alpha log pi(a | s, g) (Fujimoto & Gu 2021's TD3+BC, as OGBench normalises it).

Value goals are ``batch["goals"]`` (OGBench's: 20% the state, 50% a future state drawn geometrically, 30% random),
the actor's ``batch["bc_goals"]`` where given (a future state drawn uniformly), else the value goals. Defaults are
OGBench's ``gciql.py`` (lr 3e-4, 3 x 512 layers, layer norm, gamma 0.99, tau 0.005, expectile 0.9, DDPG+BC with
alpha 0.3; its point-maze commands set alpha 0.003). Written from its formulation, with the networks of GCIVL.
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

from platonic_rl.agents.common import StatelessPolicy, as_key, check_config, compiled_create
from platonic_rl.agents.gcivl import (GaussianActor, LayerNormMLP, expectile_loss, gaussian_actions,
                                      gaussian_log_prob, goal_batch)
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.train_state import TrainState, polyak_update


@dataclasses.dataclass(frozen=True)
class GCIQLConfig:
    obs_dim: int = 2                                   # state size (a goal is a state of the same size)
    action_dim: int = 2                                # continuous actions in [-1, 1]^action_dim
    value_hidden: tuple[int, ...] = (512, 512, 512)    # the value's and each critic's hidden widths (GELU, layer norm)
    actor_hidden: tuple[int, ...] = (512, 512, 512)    # the actor's hidden widths (GELU, layer norm)
    layer_norm: bool = True                            # layer norm after each hidden layer's activation
    learning_rate: float = 3e-4                        # Adam's, for the value, the critics and the actor
    discount: float = 0.99                             # gamma of the critics' target r + gamma m V(s', g)
    tau: float = 0.005                                 # the target critics move this fraction per update
    expectile: float = 0.9                             # the value loss's expectile (0.5: a mean, towards 1: a max)
    bc_alpha: float = 0.3                              # DDPG+BC's weight of -log pi(a | s, g) (OGBench's point mazes: 0.003)
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim"), open_unit=("discount", "expectile"))
        compute_dtype(self)  # a known compute_dtype
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"GCIQLConfig.tau must be in (0, 1], got {self.tau}")
        if not (math.isfinite(self.bc_alpha) and self.bc_alpha >= 0):
            raise ValueError(f"GCIQLConfig.bc_alpha must be finite and >= 0, got {self.bc_alpha}")


# ------------------------------------------------------------------------------------------------ networks


class GoalValue(nn.Module):
    """V(s, g) on the concatenation [s; g]: ``[B]``."""
    hidden: tuple[int, ...]
    layer_norm: bool = True
    dtype: object = None

    @nn.compact
    def __call__(self, observations, goals):
        return LayerNormMLP(self.hidden, 1, self.layer_norm, self.dtype)(
            jnp.concatenate([observations, goals], -1))[..., 0]


class GoalCritics(nn.Module):
    """Two critics Q_i(s, a, g) (their own parameters) on the concatenation [s; g; a]: ``[2, B]``."""
    hidden: tuple[int, ...]
    layer_norm: bool = True
    dtype: object = None

    @nn.compact
    def __call__(self, observations, goals, actions):
        two = nn.vmap(LayerNormMLP, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=None,
                      axis_size=2)
        return two(self.hidden, 1, self.layer_norm, self.dtype)(
            jnp.concatenate([observations, goals, actions], -1))[..., 0]


# -------------------------------------------------------------------------------------------------- losses


def gciql_value_loss(values: jax.Array, target_qs: jax.Array, expectile: float) -> tuple[jax.Array, dict]:
    """E[L_2^tau(min_i Q_i^target(s, a, g) - V(s, g))] (IQL's value loss). ``values``: ``[B]``; ``target_qs``:
    ``[2, B]``."""
    difference = target_qs.min(0) - values
    loss = jnp.mean(expectile_loss(difference, difference, expectile))
    return loss, dict(value_loss=loss, v_mean=values.mean(), v_min=values.min(), v_max=values.max())


def gciql_critic_loss(qs: jax.Array, next_values: jax.Array, rewards: jax.Array, masks: jax.Array,
                      discount: float) -> tuple[jax.Array, dict]:
    """sum_i E[(Q_i(s, a, g) - y)^2] with y = r + gamma m V(s', g) (no gradient to V). ``qs``: ``[2, B]``;
    ``next_values``, ``rewards``, ``masks``: ``[B]``."""
    targets = jax.lax.stop_gradient(rewards + discount * masks * next_values)
    loss = jnp.sum(jnp.mean(jnp.square(qs - targets), -1))
    return loss, dict(critic_loss=loss, q_mean=targets.mean(), q_min=targets.min(), q_max=targets.max())


def ddpg_bc_actor_loss(policy_qs: jax.Array, log_probs: jax.Array, alpha: float) -> tuple[jax.Array, dict]:
    """-E[q] / sg(E[|q|] + 1e-6) - alpha E[log pi(a | s, g)] with q = min_i Q_i(s, clip(mu(s, g), -1, 1), g): the
    Q term normalised by its own batch magnitude, so alpha weighs behaviour cloning against a unit-sized term.
    ``policy_qs``: ``[2, B]``; ``log_probs``: ``[B]``."""
    q = policy_qs.min(0)
    q_loss = -q.mean() / jax.lax.stop_gradient(jnp.abs(q).mean() + 1e-6)
    bc_loss = -alpha * log_probs.mean()
    return q_loss + bc_loss, dict(actor_loss=q_loss + bc_loss, q_loss=q_loss, bc_loss=bc_loss,
                                  bc_log_prob=log_probs.mean())


# --------------------------------------------------------------------------------------------------- agent


@functools.cache  # equal configs, the same optimizer object (see platonic_rl.common.train_state)
def _optimizer(config: GCIQLConfig) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


class GCIQLAgent(StatelessPolicy, flax.struct.PyTreeNode):
    value_state: TrainState      # V's parameters and their optimizer
    critic_state: TrainState     # the two critics' parameters and their optimizer
    target_critic_params: dict   # their Polyak-averaged copies
    actor_state: TrainState      # the actor's parameters and its optimizer
    config: GCIQLConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: GCIQLConfig, seed: int | jax.Array = 0) -> "GCIQLAgent":
        value_key, critic_key, actor_key = jax.random.split(as_key(seed), 3)
        zeros, actions = jnp.zeros((1, config.obs_dim)), jnp.zeros((1, config.action_dim))
        critics = _critics(config).init(critic_key, zeros, zeros, actions)
        tx = _optimizer(config)
        return cls(value_state=TrainState.create(_value(config).init(value_key, zeros, zeros), tx),
                   critic_state=TrainState.create(critics, tx), target_critic_params=critics,
                   actor_state=TrainState.create(_actor(config).init(actor_key, zeros, zeros), tx), config=config)

    def values(self, observations, goals, params=None) -> jax.Array:
        """V(s, g): ``[B]``."""
        return _value(self.config).apply(self.value_state.params if params is None else params, observations, goals)

    def q_values(self, observations, goals, actions, params=None) -> jax.Array:
        """Q_i(s, a, g) of both critics: ``[2, B]``."""
        return _critics(self.config).apply(self.critic_state.params if params is None else params, observations,
                                           goals, actions)

    def update(self, batch) -> tuple["GCIQLAgent", dict[str, jax.Array]]:
        """One step of the value, the critics and the actor, then the target critics (pure, jit-able). ``batch``:
        observations, actions, next_observations, goals (the value's), rewards; masks (default 1) and bc_goals
        (the actor's goals; default the value's) if given."""
        c = self.config
        batch, rewards, masks, actor_goals = goal_batch(batch, c.obs_dim, c.action_dim, "GCIQL")
        observations, goals, actions = batch["observations"], batch["goals"], batch["actions"]

        target_qs = _critics(c).apply(self.target_critic_params, observations, goals, actions)
        next_values = self.values(batch["next_observations"], goals)

        def value_loss(params):
            return gciql_value_loss(self.values(observations, goals, params), target_qs, c.expectile)

        def critic_loss(params):
            return gciql_critic_loss(self.q_values(observations, goals, actions, params), next_values, rewards, masks,
                                     c.discount)

        def actor_loss(params):
            mean = _actor(c).apply(params, observations, actor_goals)
            loss, metrics = ddpg_bc_actor_loss(self.q_values(observations, actor_goals, jnp.clip(mean, -1.0, 1.0)),
                                               gaussian_log_prob(mean, actions), c.bc_alpha)
            return loss, dict(metrics, action_mse=jnp.mean(jnp.square(mean - actions)))

        value_grads, value_metrics = jax.grad(value_loss, has_aux=True)(self.value_state.params)
        critic_grads, critic_metrics = jax.grad(critic_loss, has_aux=True)(self.critic_state.params)
        actor_grads, actor_metrics = jax.grad(actor_loss, has_aux=True)(self.actor_state.params)
        critic_state = self.critic_state.apply_gradients(critic_grads)
        return self.replace(value_state=self.value_state.apply_gradients(value_grads), critic_state=critic_state,
                            actor_state=self.actor_state.apply_gradients(actor_grads),
                            target_critic_params=polyak_update(self.target_critic_params, critic_state.params, c.tau)
                            ), {**value_metrics, **critic_metrics, **actor_metrics}

    def act(self, observations, goals, rng=None):
        """A sample of pi(. | s, g) if ``rng`` (a PRNG key or an int seed) is given, else its mode; clipped to
        [-1, 1]^A."""
        return gaussian_actions(_actor(self.config), self.actor_state.params, observations, goals, rng)


def _value(config: GCIQLConfig) -> GoalValue:
    return GoalValue(config.value_hidden, config.layer_norm, compute_dtype(config))


def _critics(config: GCIQLConfig) -> GoalCritics:
    return GoalCritics(config.value_hidden, config.layer_norm, compute_dtype(config))


def _actor(config: GCIQLConfig) -> GaussianActor:
    return GaussianActor(config.actor_hidden, config.action_dim, config.layer_norm, compute_dtype(config))
