"""Denoised MDP agent (dissertation chapter 5, Algorithm 1) and Dreamer as its configuration.

    config = DenoisedMDPConfig(model=WorldModelConfig(obs_shape=(25,), action_dim=6), beta=0.25)
    agent = DenoisedMDPAgent.create(config, seed=0)
    agent, metrics = jax.jit(DenoisedMDPAgent.update)(agent, batch)   # batch: observations [B, T, D],
                                                                       # prev_actions [B, T, A], rewards [B, T]
    latent = agent.initial_latent(num_envs)
    actions, latent = jax.jit(DenoisedMDPAgent.act)(agent, latent, observations, prev_actions, rng)

One ``update`` = one world-model step on eq. 5.4 (:func:`platonic_rl.denoised.losses.model_loss`) and one policy step
in the denoised latent x only (the actor and critics read x's features [h^x, x], never y or z):

* ``policy="imagine"`` (Dreamer's, :class:`ImaginedActorCritic`): ``horizon``-step rollouts of the x prior from
  every posterior state, rewards r_x, lambda-returns (gamma 0.99, lambda 0.95); the actor backpropagates through the
  imagined dynamics, the value regresses the returns; gradients clipped at norm 100.
* ``policy="sac"`` (:class:`LatentSAC`): latent SAC on posterior transitions (x_t, a_t, r_x(x_{t+1}), x_{t+1}) with
  twin Q, target networks and automatic entropy tuning; the target uses the *next* action's log-prob.

``DenoisedMDPConfig.dreamer()`` switches y and z off (with alpha = 1 this is Dreamer's loss and model).
Defaults follow the official DMC settings (``../shared/README.md``): model lr 6e-4, actor/value lr 8e-5,
Adam eps 1e-7, clip 100, alpha 1, 3 free nats on KL_x.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, get_args

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import as_batch, as_key, check_config, compiled_create
from platonic_rl.common import losses as rl_losses
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.policies import DreamerTanhNormalPolicy, TanhNormalPolicy, tanh_normal_sample
from platonic_rl.common.train_state import TrainState, polyak_update
from platonic_rl.denoised import losses
from platonic_rl.denoised.model import (FactoredRSSM, WorldModelConfig, all_features, features, imagine_x, init_params,
                                        initial_state, observe)

Batch = dict[str, jax.Array]
ActorKind = Literal["dreamer", "clipped"]  # DenoisedMDPConfig.actor


@dataclasses.dataclass(frozen=True)
class DenoisedMDPConfig:
    model: WorldModelConfig = WorldModelConfig()  # the world model's sizes (x, y, z latents; encoders)
    # Eq. 5.4: L_recon + alpha (KL_x + beta KL_y + beta KL_z).
    alpha: float = 1.0           # weight of the KL terms (1 with y and z off: Dreamer's loss)
    beta: float = 0.25           # Table D.5 picks beta per environment from (0, 1]; 1 = no regularisation
    free_nats: float = 3.0       # KL_x is clamped below at this, per step (D.2.1); KL_y and KL_z get none
    kl_split: bool = False       # D.2.1's alternative: KL_x = beta max(KL_x, free_nats) + (1 - beta) KL_x
    # Policy learning in x.
    policy: Literal["imagine", "sac"] = "imagine"  # Dreamer's imagined actor-critic, or latent SAC on posteriors
    # "dreamer": DreamerV1's actor, as the official code (mean 5 tanh(m / 5), sigma softplus(s + c) + 1e-4, 5 at
    # the start, ELU); "clipped": an unbounded mean and log sigma clipped to [-5, 2] (ReLU), the earlier results'.
    actor: ActorKind = "dreamer"
    actor_hidden: tuple[int, ...] = (400, 400, 400)   # the actor's hidden widths (it reads x's features)
    critic_hidden: tuple[int, ...] = (400, 400, 400)  # the value's (imagine) or each Q's (sac) hidden widths
    horizon: int = 15                  # imagined steps per rollout (imagine)
    imagine_starts: int | None = None  # imagine from a random subset of the B x T posterior states (None: all)
    discount: float = 0.99             # gamma of the returns (both policies)
    lam: float = 0.95                  # lambda of the imagined lambda-returns
    # Optimisation.
    model_learning_rate: float = 6e-4  # Adam's, for the world model
    actor_learning_rate: float = 8e-5  # Adam's, for the imagined actor
    critic_learning_rate: float = 8e-5  # Adam's, for the imagined value
    adam_eps: float = 1e-7             # Adam's epsilon (the official code's)
    grad_clip: float = 100.0           # global-norm clip of the model's, actor's and value's gradients
    sac_learning_rate: float = 3e-4    # Adam's, for SAC's actor, critics and entropy weight
    sac_tau: float = 0.005             # SAC's target networks move this fraction towards the critics per update
    sac_entropy_init: float = 0.1      # SAC's initial entropy weight (then tuned to -action_dim)

    def __post_init__(self):
        check_config(self)  # actor/critic_hidden widths >= 1; every *_learning_rate finite and > 0
        if self.alpha <= 0 or not 0 < self.beta <= 1:
            raise ValueError(f"DenoisedMDPConfig: need alpha > 0 and beta in (0, 1], got {self.alpha}, {self.beta}")
        if self.policy not in ("imagine", "sac"):
            raise ValueError(f"DenoisedMDPConfig.policy must be 'imagine' or 'sac', got {self.policy!r}")
        if self.actor not in get_args(ActorKind):
            raise ValueError(f"DenoisedMDPConfig.actor must be one of {get_args(ActorKind)}, got {self.actor!r}")
        if self.imagine_starts is not None and self.imagine_starts < 1:
            raise ValueError(f"DenoisedMDPConfig.imagine_starts must be >= 1 or None, got {self.imagine_starts}")
        if self.horizon < 1 or self.free_nats < 0:
            raise ValueError("DenoisedMDPConfig: horizon must be >= 1 and free_nats >= 0")

    @classmethod
    def dreamer(cls, model: WorldModelConfig, **kwargs) -> "DenoisedMDPConfig":
        """Dreamer: x only, alpha = 1, beta irrelevant (no y/z). Every other field of ``model`` is kept."""
        return cls(model=dataclasses.replace(model, y_belief=0, y_state=0, z_belief=0, z_state=0),
                   **{"alpha": 1.0, "beta": 1.0, **kwargs})


class Critic(nn.Module):
    """V(x) (``with_action=False``) or Q(x, a)."""

    hidden: tuple[int, ...]
    dtype: Any = None  # computation dtype (None: float32); values are returned as float32

    @nn.compact
    def __call__(self, x, action=None):
        if action is not None:
            x = jnp.concatenate([x, action], -1)
        for width in self.hidden:
            x = nn.elu(nn.Dense(width, dtype=self.dtype)(x))
        return nn.Dense(1, dtype=self.dtype)(x)[..., 0].astype(jnp.float32)


def _adam(lr, c: DenoisedMDPConfig, clip: bool = True):
    """Adam (with the global-norm clip) on the parameters flattened into one vector: the same update, as a few
    large operations instead of a dozen per parameter array (the world model's update compiles about a quarter
    faster; its optimizer state is one vector per moment)."""
    parts = [optax.clip_by_global_norm(c.grad_clip)] if clip else []
    return optax.flatten(optax.chain(*parts, optax.adam(lr, eps=c.adam_eps)))


@functools.cache  # equal configs, the same optimizer objects (see platonic_rl.common.train_state)
def _optimizers(c: DenoisedMDPConfig) -> dict[str, optax.GradientTransformation]:
    return dict(model=_adam(c.model_learning_rate, c), **POLICY_LEARNERS[c.policy].optimizers(c))


def validate_batch(batch: Batch, c: WorldModelConfig) -> None:
    for key in ("observations", "prev_actions", "rewards"):
        if key not in batch:
            raise ValueError(f"batch is missing {key!r}; expected observations, prev_actions, rewards")
    if batch["rewards"].ndim != 2:
        raise ValueError(f"batch['rewards'] must be [B, T], got {batch['rewards'].shape}")
    b, t = batch["rewards"].shape
    if b == 0 or t == 0:
        raise ValueError(f"batch['rewards'] must be [B, T] with batch size B >= 1 and sequence length T >= 1, got "
                         f"{batch['rewards'].shape}")
    if batch["prev_actions"].shape != (b, t, c.action_dim):
        raise ValueError(f"batch['prev_actions'] must be [{b}, {t}, {c.action_dim}], got {batch['prev_actions'].shape}")
    if tuple(batch["observations"].shape) != (b, t, *c.obs_shape):
        raise ValueError(f"batch['observations'] must be [{b}, {t}, {', '.join(map(str, c.obs_shape))}], got "
                         f"{batch['observations'].shape}")


def critic_module(config: DenoisedMDPConfig) -> Critic:
    return Critic(config.critic_hidden, compute_dtype(config.model))


# ---------------------------------------------------------------------------------- policy learners
# How the policy learns in x from the world model's posterior states: one object per ``DenoisedMDPConfig.policy``,
# each with its optimizers, its critic's parameters and its step (the agent's fields it returns replaced).


class ImaginedActorCritic:
    """``policy="imagine"`` (Dreamer's): ``horizon``-step rollouts of the x prior from every posterior state, rewards
    r_x, lambda-returns; the actor backpropagates through the imagined dynamics, the value net V(x) regresses the
    returns. Adam with the global-norm clip for both."""

    def optimizers(self, c: DenoisedMDPConfig) -> dict[str, optax.GradientTransformation]:
        return dict(actor=_adam(c.actor_learning_rate, c), critic=_adam(c.critic_learning_rate, c))

    def init_critic(self, c: DenoisedMDPConfig, key, feat, action):
        return critic_module(c).init(key, feat)

    def entropy_state(self, c: DenoisedMDPConfig, tx) -> None:
        return None

    def loss(self, agent: "DenoisedMDPAgent", policy_params, model_params, states, key):
        """Actor loss + value loss on imagined x-rollouts. ``policy_params = (actor, value)``; the returns
        bootstrap from a stop-gradient copy of the value net and the value regresses stop-gradient returns, so
        one gradient of the sum gives each network its own loss's gradient."""
        c = agent.config
        actor_params, critic_params = policy_params
        start = jax.tree.map(lambda s: jax.lax.stop_gradient(s.reshape((-1, s.shape[-1]))),
                             {"hx": states["hx"], "x": states["x"]})
        key, subset_key = jax.random.split(key)
        n = start["x"].shape[0]
        if c.imagine_starts is not None and c.imagine_starts < n:
            rows = jax.random.choice(subset_key, n, (c.imagine_starts,), replace=False)
            start = jax.tree.map(lambda s: s[rows], start)
        # The actor reads detached features, as in Dreamer: its gradient flows through the imagined dynamics
        # (the actions' effect on later states), not back through its own input.
        policy = lambda feat, k: agent._policy(actor_params, jax.lax.stop_gradient(feat), k)[0]  # noqa: E731
        imagined, _ = imagine_x(c.model, model_params, start, policy, c.horizon, key)
        feat = features(imagined, "x")                                               # [H + 1, N, F]
        rewards = agent.model.apply(model_params, imagined, method="reward")["x"][1:]  # r_x(x_{t+1})
        values = critic_module(c).apply(jax.lax.stop_gradient(critic_params), feat)
        returns = losses.lambda_returns(rewards, values, c.discount, c.lam)
        actor_loss = losses.imagination_actor_loss(returns, c.discount)
        critic_values = critic_module(c).apply(critic_params, jax.lax.stop_gradient(feat[:-1]))
        critic_loss = losses.value_loss(critic_values, returns, c.discount)
        return actor_loss + critic_loss, dict(actor_loss=actor_loss, value_loss=critic_loss,
                                              imagined_return=returns[0].mean(), imagined_reward=rewards.mean())

    def update(self, agent: "DenoisedMDPAgent", model_params, states, batch: Batch, policy_key, target_key):
        """One step of the actor and the value net; returns (the agent's replaced fields, metrics)."""
        (actor_grads, critic_grads), metrics = jax.grad(self.loss, argnums=1, has_aux=True)(
            agent, (agent.actor_params, agent.critic_params), model_params, states, policy_key)
        return dict(actor_state=agent.actor_state.apply_gradients(actor_grads),
                    critic_state=agent.critic_state.apply_gradients(critic_grads)), metrics


class LatentSAC:
    """``policy="sac"``: SAC on the posterior's transitions (x_t, a_t, r_x(x_{t+1}), x_{t+1}) with twin Q nets,
    Polyak-averaged targets and automatic entropy tuning (target entropy -|A|); the target uses the *next* action's
    log-prob. Plain Adam, no clip (D.2.1)."""

    def optimizers(self, c: DenoisedMDPConfig) -> dict[str, optax.GradientTransformation]:
        return dict(actor=_adam(c.sac_learning_rate, c, False), critic=_adam(c.sac_learning_rate, c, False),
                    entropy=_adam(c.sac_learning_rate, c, False))

    def init_critic(self, c: DenoisedMDPConfig, key, feat, action):
        return jax.vmap(lambda k: critic_module(c).init(k, feat, action))(jax.random.split(key, 2))

    def entropy_state(self, c: DenoisedMDPConfig, tx) -> TrainState:
        return TrainState.create(jnp.log(jnp.float32(c.sac_entropy_init)), tx["entropy"])

    def transitions(self, agent: "DenoisedMDPAgent", model_params, states, batch: Batch):
        """(x_t, a_t, r_x(x_{t+1}), x_{t+1}) from the posterior of the batch's sequences, flattened."""
        feat = jax.lax.stop_gradient(features(states, "x"))
        rewards = jax.lax.stop_gradient(agent.model.apply(model_params, states, method="reward")["x"])
        flat = lambda x: x.reshape((-1, *x.shape[2:]))  # noqa: E731
        return (flat(feat[:, :-1]), flat(batch["prev_actions"][:, 1:]), flat(rewards[:, 1:]), flat(feat[:, 1:]))

    def critic_loss(self, agent: "DenoisedMDPAgent", critic_params, transitions, key):
        c = agent.config
        x, a, r, x_next = transitions
        q = jax.vmap(lambda p: critic_module(c).apply(p, x, a))(critic_params)
        next_a, next_log_prob = agent._policy(agent.actor_params, x_next, key)
        next_q = jax.vmap(lambda p: critic_module(c).apply(p, x_next, next_a))(agent.target_critic_params)
        target = rl_losses.sac_critic_target(r, next_q, next_log_prob, jnp.exp(agent.log_entropy_weight), c.discount)
        return jnp.mean(jnp.square(q - jax.lax.stop_gradient(target)[None])), dict(q=q.mean())

    def actor_loss(self, agent: "DenoisedMDPAgent", actor_params, critic_params, x, key):
        a, log_prob = agent._policy(actor_params, x, key)
        q = jax.vmap(lambda p: critic_module(agent.config).apply(p, x, a))(critic_params)
        return rl_losses.sac_actor_loss(q, log_prob, jnp.exp(agent.log_entropy_weight)), log_prob.mean()

    def update(self, agent: "DenoisedMDPAgent", model_params, states, batch: Batch, policy_key, target_key):
        """One step of the twin Q nets, the actor and the entropy weight, then the targets; returns (the agent's
        replaced fields, metrics)."""
        c = agent.config
        transitions = self.transitions(agent, model_params, states, batch)
        critic_grads, metrics = jax.grad(self.critic_loss, argnums=1, has_aux=True)(
            agent, agent.critic_params, transitions, target_key)
        actor_grads, log_prob = jax.grad(self.actor_loss, argnums=1, has_aux=True)(
            agent, agent.actor_params, agent.critic_params, transitions[0], policy_key)
        e_grad = jax.grad(rl_losses.entropy_weight_loss)(agent.log_entropy_weight, log_prob, -float(c.model.action_dim))
        entropy_state = agent.entropy_state.apply_gradients(e_grad)
        critic_state = agent.critic_state.apply_gradients(critic_grads)
        new = dict(entropy_state=entropy_state, actor_state=agent.actor_state.apply_gradients(actor_grads),
                   critic_state=critic_state,
                   target_critic_params=polyak_update(agent.target_critic_params, critic_state.params, c.sac_tau))
        return new, dict(metrics, log_prob=log_prob, entropy_weight=jnp.exp(entropy_state.params))


POLICY_LEARNERS = {"imagine": ImaginedActorCritic(), "sac": LatentSAC()}
"""``DenoisedMDPConfig.policy`` -> how the policy learns in x."""


class DenoisedMDPAgent(flax.struct.PyTreeNode):
    model_state: TrainState            # model_params
    actor_state: TrainState            # actor_params
    critic_state: TrainState           # critic_params: value net (imagine) or two stacked Q nets (sac)
    target_critic_params: Any          # SAC targets (a copy, unused by "imagine")
    entropy_state: TrainState | None   # SAC's log_entropy_weight (None for "imagine")
    rng: jax.Array
    # State observations enter the model as (o - obs_mean) / obs_std (identity until
    # with_observation_statistics sets them; unused for pixels): with unit-variance Gaussian likelihoods, a
    # dimension of spread s is worth at most s^2 / 2 nats to reconstruct, so raw state vectors whose positions
    # vary by 0.05 while velocities vary by 5 would leave the positions out of the latent.
    obs_mean: jax.Array
    obs_std: jax.Array
    config: DenoisedMDPConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: DenoisedMDPConfig, seed: int | jax.Array = 0) -> "DenoisedMDPAgent":
        rng = as_key(seed)
        rng, model_key, actor_key, critic_key = jax.random.split(rng, 4)
        m = config.model
        feat = jnp.zeros((1, m.feature_dim("x")))
        action = jnp.zeros((1, m.action_dim))
        model_params = init_params(m, model_key)
        actor_params = cls.actor_module(config).init(actor_key, feat)
        learner = POLICY_LEARNERS[config.policy]
        critic_params = learner.init_critic(config, critic_key, feat, action)
        tx = _optimizers(config)
        vector_dim = () if m.pixels else (m.obs_shape[0],)  # pixels: unused scalars (checkpoints refuse size 0)
        entropy_state = learner.entropy_state(config, tx)
        return cls(model_state=TrainState.create(model_params, tx["model"]),
                   actor_state=TrainState.create(actor_params, tx["actor"]),
                   critic_state=TrainState.create(critic_params, tx["critic"]), target_critic_params=critic_params,
                   entropy_state=entropy_state, rng=rng, obs_mean=jnp.zeros(vector_dim), obs_std=jnp.ones(vector_dim),
                   config=config)

    # The parameters, read from their train states.
    model_params = property(lambda self: self.model_state.params)
    actor_params = property(lambda self: self.actor_state.params)
    critic_params = property(lambda self: self.critic_state.params)
    log_entropy_weight = property(lambda self: self.entropy_state.params)
    policy_learner = property(lambda self: POLICY_LEARNERS[self.config.policy])  # ImaginedActorCritic or LatentSAC

    @property
    def model(self) -> FactoredRSSM:
        return FactoredRSSM(self.config.model)

    def normalise(self, observations: jax.Array) -> jax.Array:
        """What the model sees and reconstructs: state observations standardised with :attr:`obs_mean` and
        :attr:`obs_std`; pixels unchanged (uint8, scaled by the encoder)."""
        if self.config.model.pixels:
            return observations
        return (observations - self.obs_mean) / self.obs_std

    def with_observation_statistics(self, observations, min_std: float = 1e-3) -> "DenoisedMDPAgent":
        """The agent with its observation normaliser set from ``observations`` ``[..., D]`` (e.g. the prefill
        data): per-dimension mean and standard deviation, the latter at least ``min_std`` (a constant dimension is
        centred, not blown up). Pixels need no statistics. Non-finite observations are refused where they are concrete;
        traced (inside a compiled loop), they show in the updates' finiteness checks."""
        m = self.config.model
        if m.pixels:
            raise ValueError("with_observation_statistics: pixel observations are not standardised (the encoder "
                             "scales uint8 images to [-0.5, 0.5])")
        observations = jnp.asarray(observations, jnp.float32)
        if observations.ndim < 2 or observations.shape[-1] != m.obs_shape[0]:
            raise ValueError(f"with_observation_statistics: observations must be [..., {m.obs_shape[0]}] with at "
                             f"least one row, got {observations.shape}")
        flat = observations.reshape((-1, m.obs_shape[0]))
        try:
            finite = bool(jnp.all(jnp.isfinite(flat)))
        except jax.errors.ConcretizationTypeError:  # traced
            finite = True
        if not finite:
            raise ValueError("with_observation_statistics: observations contain non-finite values")
        return self.replace(obs_mean=flat.mean(0), obs_std=jnp.maximum(flat.std(0), min_std))

    @staticmethod
    def actor_module(config: DenoisedMDPConfig) -> DreamerTanhNormalPolicy | TanhNormalPolicy:
        """pi(a | x): reads x's features [h^x, x] only; ``config.actor`` picks the distribution's parametrisation."""
        actor = DreamerTanhNormalPolicy if config.actor == "dreamer" else TanhNormalPolicy
        return actor(config.actor_hidden, config.model.action_dim, dtype=compute_dtype(config.model))

    def _policy(self, actor_params, feat, key):
        mean, log_std = self.actor_module(self.config).apply(actor_params, feat)
        return tanh_normal_sample(key, mean, log_std)

    # ---------------------------------------------------------------------------- world model
    def model_loss_fn(self, model_params, batch: Batch, key):
        """Eq. 5.4 on a batch of sequences; returns (loss, (posterior states, metrics))."""
        c, m = self.config, self.config.model
        target = self.normalise(batch["observations"])
        states, stats = observe(m, model_params, target, batch["prev_actions"], key)
        recon = self.model.apply(model_params, all_features(m, states), method="decode")
        if m.pixels:
            target = target.astype(jnp.float32) / 255.0 - 0.5
        recon_nll = losses.gaussian_nll(target, recon, len(m.obs_shape))
        predicted = self.model.apply(model_params, states, method="reward")
        reward_nll = losses.gaussian_nll(batch["rewards"], sum(predicted.values()), 0)
        loss, metrics = losses.model_loss(recon_nll, reward_nll, stats, c.alpha, c.beta, c.free_nats, c.kl_split)
        return loss, (states, metrics)

    # ---------------------------------------------------------------------------------- update
    def update(self, batch: Batch) -> tuple["DenoisedMDPAgent", dict]:
        """One world-model step, then one policy step in x. Pure and jit-able; ``batch`` entries may be arrays or
        nested lists."""
        c = self.config
        batch = as_batch(batch, ("observations", "prev_actions", "rewards"))
        validate_batch(batch, c.model)
        rng, model_key, policy_key, target_key = jax.random.split(self.rng, 4)
        (_, (states, metrics)), grads = jax.value_and_grad(self.model_loss_fn, has_aux=True)(
            self.model_params, batch, model_key)
        model_state = self.model_state.apply_gradients(grads)
        model_params = model_state.params
        metrics["model_grad_norm"] = optax.global_norm(grads)
        new, policy_metrics = self.policy_learner.update(self, model_params, states, batch, policy_key, target_key)
        metrics.update(policy_metrics)
        return self.replace(**new, model_state=model_state, rng=rng), metrics

    # ------------------------------------------------------------------------------- inference
    def initial_policy_state(self, batch_size: int) -> dict:
        """The contract's policy state: the filter's latent (:meth:`initial_latent`)."""
        return self.initial_latent(batch_size)

    def step(self, policy_state: dict, observations, goals=None, prev_actions=None, rng=None):
        """The contract's acting form: ``(actions, latent)`` from the latent, the observations and the actions
        executed before them (zeros at an episode's start); ``goals`` are not used (the reward sets the task)."""
        if prev_actions is None:
            raise ValueError("DenoisedMDPAgent.step: prev_actions (the actions executed before these observations, "
                             "zeros at an episode's start) are required: the filter conditions on them")
        return self.act(policy_state, observations, prev_actions, rng)

    def initial_latent(self, batch_size: int) -> dict:
        return initial_state(self.config.model, (batch_size,))

    def posterior(self, observations, prev_actions, key):
        """Filter whole sequences of raw observations ``[B, T, ...]`` (reached by ``prev_actions`` ``[B, T, A]``)
        from the zero latent: :func:`~platonic_rl.denoised.model.observe` on what the model sees. Returns (states,
        stats) as ``observe`` does."""
        return observe(self.config.model, self.model_params, self.normalise(observations), prev_actions, key)

    def filter(self, latent: dict, observations, prev_actions, rng) -> dict:
        """One posterior step: the latent after seeing ``observations`` [N, ...] reached by ``prev_actions``
        (a posterior sample; the posterior mean if ``rng`` is None)."""
        embed = self.model.apply(self.model_params, self.normalise(observations), method="encode")
        return self.model.apply(self.model_params, latent, prev_actions, embed, rng, method="observe_step")[0]

    def act(self, latent: dict, observations, prev_actions, rng: jax.Array | None = None):
        """Filter one step, then act from x's features: with ``rng`` (a PRNG key or an int seed) a posterior sample
        and a sample of pi; without, deterministically, the posterior mean and tanh of pi's pre-tanh mean mu (the
        tanh-Normal's median; DreamerV1 takes the likeliest of 100 samples). ``latent`` (e.g.
        :meth:`initial_latent`) must have the observations' batch size N. Returns (actions [N, A] in [-1, 1], new
        latent)."""
        m = self.config.model
        observations, prev_actions = jnp.asarray(observations), jnp.asarray(prev_actions)
        if (observations.ndim < 1 or tuple(observations.shape[1:]) != tuple(m.obs_shape)
                or prev_actions.shape[1:] != (m.action_dim,) or prev_actions.shape[0] != observations.shape[0]):
            raise ValueError(f"act: observations must be [N, {', '.join(map(str, m.obs_shape))}] and prev_actions "
                             f"[N, {m.action_dim}], got {observations.shape} and {prev_actions.shape}")
        keys = sorted(k for f in m.factors for k in (f"h{f}", f))
        if not isinstance(latent, dict) or sorted(latent) != keys:
            raise ValueError(f"act: latent must be a dict with keys {keys} (see initial_latent), got "
                             f"{sorted(latent) if isinstance(latent, dict) else type(latent).__name__}")
        latent_shapes = {k: tuple(jnp.shape(v)) for k, v in latent.items()}
        if any(len(shape) != 2 or shape[0] != observations.shape[0] for shape in latent_shapes.values()):
            raise ValueError(f"act: latent batch size must match observations: latent shapes {latent_shapes} "
                             f"(initial_latent(N) gives [N, size]) vs observations {tuple(observations.shape)} "
                             f"(N = {observations.shape[0]})")
        if rng is None:  # deterministic: the posterior means, then tanh(mu)
            latent = self.filter(latent, observations, prev_actions, None)
            mean, _ = self.actor_module(self.config).apply(self.actor_params, features(latent, "x"))
            return jnp.tanh(mean), latent
        filter_key, policy_key = jax.random.split(as_key(rng))
        latent = self.filter(latent, observations, prev_actions, filter_key)
        return self._policy(self.actor_params, features(latent, "x"), policy_key)[0], latent
