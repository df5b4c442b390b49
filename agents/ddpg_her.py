"""DDPG + HER (goal-conditioned DDPG with hindsight relabelling), optionally with a quasimetric critic as
in Liu et al. 2022 (MRN); a baseline for online GCRL, as a jit-able pytree agent.

Rewards follow dissertation C.3.3 (no access to the task's reward function): r = 0 if the next state
*equals* the (relabelled) goal in the goal dimensions, else -1. Critic targets
y = r + gamma Q'(s', pi'(s', g), g), clipped to [-1 / (1 - gamma), 0]; actor loss
-Q(s, pi(s, g), g) + action_l2 * ||pi(s, g)||^2; target networks by Polyak averaging.

``critic='mlp'``: Q = MLP(s, a, g). ``critic='mrn'`` or ``'iqe'``: Q = -d(f(s, a), h(g)) with a quasimetric
head from :mod:`platonic_rl.qrl.quasimetrics` on separate (s, a) and goal encoders into a shared latent.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.common.networks import MLP, compute_dtype
from platonic_rl.common.train_state import TrainState, polyak_update
from platonic_rl.qrl.quasimetrics import make_head


@dataclasses.dataclass(frozen=True)
class DDPGHERConfig:
    obs_dim: int = 10                          # state size (a goal is a state of the same size)
    action_dim: int = 4                        # continuous actions in [-1, 1]^action_dim
    goal_dims: tuple[int, ...] = (0, 1, 2)     # where goals live in the state vector (Fetch Reach): the reward's test
    hidden: tuple[int, ...] = (256, 256, 256)  # hidden widths of the actor, the critic and its encoders
    critic: Literal["mlp", "mrn", "iqe"] = "mlp"  # Q = MLP(s, a, g), or -d(f(s, a), h(g)) with an MRN or IQE head
    latent_dim: int = 2048                     # quasimetric critics' latent: IQE 64 x 32 as in QRL
    gamma: float = 0.98                        # discount; targets are clipped to [-1 / (1 - gamma), 0]
    polyak: float = 0.95                       # the target networks keep this fraction at each update
    action_l2: float = 1.0                     # weight of ||pi(s, g)||^2 in the actor loss
    actor_learning_rate: float = 1e-3          # Adam's, for the actor
    critic_learning_rate: float = 1e-3         # Adam's, for the critic
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self)  # hidden widths >= 1; actor/critic_learning_rate finite and > 0
        compute_dtype(self)  # a known compute_dtype
        if self.critic not in ("mlp", "mrn", "iqe"):
            raise ValueError(f"DDPGHERConfig.critic must be 'mlp', 'mrn' or 'iqe', got {self.critic!r}")
        if not 0 < self.gamma < 1 or not 0 <= self.polyak < 1:
            raise ValueError(f"DDPGHERConfig: need 0 < gamma < 1 and 0 <= polyak < 1, got {self.gamma}, {self.polyak}")
        if any(not 0 <= d < self.obs_dim for d in self.goal_dims):
            raise ValueError(f"DDPGHERConfig.goal_dims {self.goal_dims} must index a {self.obs_dim}-dim state")


class Actor(nn.Module):
    config: DDPGHERConfig

    @nn.compact
    def __call__(self, observations, goals):
        mlp = MLP(self.config.hidden, self.config.action_dim, dtype=compute_dtype(self.config))
        return jnp.tanh(mlp(jnp.concatenate([observations, goals], -1)))


class Critic(nn.Module):
    config: DDPGHERConfig

    @nn.compact
    def __call__(self, observations, actions, goals):
        c = self.config
        if c.critic == "mlp":
            return MLP(c.hidden, 1, dtype=compute_dtype(c))(jnp.concatenate([observations, actions, goals], -1))[..., 0]
        z_sa = MLP(c.hidden, c.latent_dim, dtype=compute_dtype(c), name="sa_encoder")(
            jnp.concatenate([observations, actions], -1))
        z_g = MLP(c.hidden, c.latent_dim, dtype=compute_dtype(c), name="goal_encoder")(goals)
        head = make_head("mrn") if c.critic == "mrn" else make_head("iqe", dim_per_component=32)
        return -head(z_sa, z_g)


def goal_reward(next_observations: jax.Array, goals: jax.Array, goal_dims: tuple[int, ...]) -> jax.Array:
    """0 where the next state equals the goal in the goal dimensions, else -1 (C.3.3)."""
    idx = jnp.asarray(goal_dims)
    reached = jnp.all(next_observations[..., idx] == goals[..., idx], axis=-1)
    return jnp.where(reached, 0.0, -1.0)


@functools.cache  # equal configs, the same optimizer objects (see platonic_rl.common.train_state)
def _optimizers(c: DDPGHERConfig) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    return optax.adam(c.actor_learning_rate), optax.adam(c.critic_learning_rate)


class DDPGHERAgent(StatelessPolicy, flax.struct.PyTreeNode):
    actor_state: TrainState   # actor_params
    critic_state: TrainState  # critic_params
    target_actor_params: Any
    target_critic_params: Any
    rng: jax.Array
    config: DDPGHERConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: DDPGHERConfig, seed: int | jax.Array = 0) -> "DDPGHERAgent":
        rng = as_key(seed)
        rng, actor_key, critic_key = jax.random.split(rng, 3)
        obs, act = jnp.zeros((1, config.obs_dim)), jnp.zeros((1, config.action_dim))
        actor_params = Actor(config).init(actor_key, obs, obs)
        critic_params = Critic(config).init(critic_key, obs, act, obs)
        actor_tx, critic_tx = _optimizers(config)
        return cls(actor_state=TrainState.create(actor_params, actor_tx),
                   critic_state=TrainState.create(critic_params, critic_tx), target_actor_params=actor_params,
                   target_critic_params=critic_params, rng=rng, config=config)

    # The parameters, read from their train states.
    actor_params = property(lambda self: self.actor_state.params)
    critic_params = property(lambda self: self.critic_state.params)

    def critic_loss(self, critic_params, batch):
        c = self.config
        obs, actions, next_obs, goals = (batch[k] for k in ("observations", "actions", "next_observations", "goals"))
        rewards = goal_reward(next_obs, goals, c.goal_dims)
        next_actions = Actor(c).apply(self.target_actor_params, next_obs, goals)
        target_q = Critic(c).apply(self.target_critic_params, next_obs, next_actions, goals)
        target = jnp.clip(rewards + c.gamma * target_q, -1.0 / (1.0 - c.gamma), 0.0)
        q = Critic(c).apply(critic_params, obs, actions, goals)
        loss = jnp.mean(jnp.square(q - jax.lax.stop_gradient(target)))
        return loss, dict(critic_loss=loss, q=q.mean(), reward=rewards.mean())

    def actor_loss(self, actor_params, critic_params, batch):
        c = self.config
        actions = Actor(c).apply(actor_params, batch["observations"], batch["goals"])
        q = Critic(c).apply(critic_params, batch["observations"], actions, batch["goals"])
        loss = -jnp.mean(q) + c.action_l2 * jnp.mean(jnp.square(actions))
        return loss, dict(actor_loss=loss)

    def update(self, batch) -> tuple["DDPGHERAgent", dict[str, jax.Array]]:
        """One critic step, one actor step and the Polyak target update (pure, jit-able); ``batch``:
        observations, next_observations, goals [B, obs_dim] and actions [B, action_dim] (arrays or lists)."""
        keys = ("observations", "actions", "next_observations", "goals")
        batch = as_batch(batch, keys)
        for key in keys:
            if key not in batch:
                raise ValueError(f"batch is missing {key!r}")
        c = self.config
        obs = batch["observations"]
        if obs.ndim != 2 or obs.shape[1] != c.obs_dim:
            raise ValueError(f"batch['observations'] must be [B, {c.obs_dim}], got {obs.shape}")
        if obs.shape[0] == 0:
            raise ValueError(f"batch['observations'] has batch size B = 0 (shape {obs.shape}); "
                             "update needs B >= 1 rows")
        for key, shape in (("actions", (obs.shape[0], c.action_dim)), ("next_observations", obs.shape),
                           ("goals", obs.shape)):
            if batch[key].shape != shape:
                raise ValueError(f"batch[{key!r}] must have shape {shape}, got {batch[key].shape}")
        c_grads, critic_metrics = jax.grad(self.critic_loss, has_aux=True)(self.critic_params, batch)
        critic_state = self.critic_state.apply_gradients(c_grads)
        a_grads, actor_metrics = jax.grad(self.actor_loss, has_aux=True)(self.actor_params, critic_state.params,
                                                                         batch)
        actor_state = self.actor_state.apply_gradients(a_grads)
        tau = 1 - c.polyak  # the target keeps the fraction c.polyak
        agent = self.replace(actor_state=actor_state, critic_state=critic_state,
                             target_actor_params=polyak_update(self.target_actor_params, actor_state.params, tau),
                             target_critic_params=polyak_update(self.target_critic_params, critic_state.params, tau))
        return agent, {**critic_metrics, **actor_metrics}

    def act(self, observations, goals, rng=None):
        """The deterministic policy pi(s, g) (exploration noise is added by the training loop); ``rng`` (a key or
        an int seed) is unused."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        return Actor(self.config).apply(self.actor_params, observations, goals)
