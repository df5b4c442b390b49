"""Quasimetric RL for continuous actions (dissertation section 4.3.4, appendix C.3.3) as a jit-able pytree.

    agent = QRLContinuousAgent.create(QRLContinuousConfig(obs_dim=10, action_dim=4), seed=0)
    agent, metrics = jax.jit(QRLContinuousAgent.update)(agent, batch)
    actions = jax.jit(QRLContinuousAgent.act)(agent, observations, goals, rng)

Batch: observations [B, D], actions [B, A] in [-1, 1], next_observations [B, D], rewards [B] (-1 per step),
goals [B, D] (goal states, e.g. future states relabelled by the replay buffer) and, optionally, bc_goals [B, D]
(the goals of the behaviour-cloning term, e.g. future states of the same trajectory; default: goals). With ``image_shape`` set
(e.g. ``(64, 64, 3)``), observations, next_observations and goals are uint8 images ``[B, 64, 64, 3]``
instead: every critic encoder and the actor then start with their own
:class:`~platonic_rl.common.networks.AtariConvBackbone` (C.3.3's image settings: f = backbone-512-128, transition
weight 0.1, 125 updates per 10 rollouts -- see ``IMAGE_DEFAULTS``).

* **Critics**: ``num_critics`` (2) independent quasimetric critics, each with its own encoder f_i,
  projector + IQE head d_i, residual latent dynamics T_i and Lagrange multiplier lambda_i, trained with the
  QRL objective (eq. 4.12) with phi(x) = -softplus(15 - x, beta=0.1) (C.3.3) over random (s, g) pairs --
  the batch's goals rolled by one -- plus ``transition_weight`` x the transition loss: the discrete
  agent's critic and loss (:class:`~platonic_rl.agents.qrl.QuasimetricCritic`,
  :func:`~platonic_rl.agents.qrl.quasimetric_critic_loss`) with the actions as action features.
* **Actor**: a tanh-Normal policy pi(a | s, g) minimising max_i d_i(T_i(f_i(s), a), f_i(g)) + alpha log pi,
  with the entropy weight alpha adapted towards the target entropy -|A| (Haarnoja et al. 2018; off with
  ``adaptive_entropy=False``), plus for offline data an optional behaviour-cloning term
  ``bc_weight * E[-log pi(a_data | s, g_bc)]``, the negative log-likelihood of the dataset's action. With
  ``actor_distance_scale="batch_mean"`` the distance term is divided by its stop-gradient batch mean (OGBench's QRL),
  which makes ``bc_weight`` a weight relative to a unit-sized critic term, whatever the distances' scale.

Defaults are the state-based Fetch settings of C.3.3.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.agents.qrl import (QuasimetricCritic, QuasimetricCriticConfig, check_critic_fields,
                                    quasimetric_critic_loss)
from platonic_rl.common.losses import entropy_weight_loss
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.policies import GoalConditionedPolicy, tanh_normal_log_prob, tanh_normal_sample
from platonic_rl.common.train_state import TrainState
from platonic_rl.qrl import losses

Batch = dict[str, jax.Array]
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "goals")


@dataclasses.dataclass(frozen=True)
class QRLContinuousConfig:
    # Inputs.
    obs_dim: int = 10                                       # state size (a goal is a state of the same size)
    action_dim: int = 4                                     # continuous actions in [-1, 1]^action_dim
    obs_center: tuple[float, ...] | None = None             # the encoder reads (obs - obs_center) * obs_scale
    obs_scale: tuple[float, ...] | None = None              # None: no centring / scaling
    image_shape: tuple[int, int, int] | None = None         # (H, W, C) for image observations (obs_dim is then unused)
    # Critic networks (C.3.3): f x-512-512-128, projector 128-512-2048, IQE-maxmean 64 x 32, T residual.
    encoder_hidden: tuple[int, ...] = (512, 512)            # f's hidden widths (state -> latent)
    latent_dim: int = 128                                   # the latent z = f(s) that T steps and the head compares
    projector_hidden: tuple[int, ...] = (512,)              # the projector's hidden widths (latent -> head input)
    head: Literal["iqe", "l2"] = "iqe"                      # the distance: IQE (a quasimetric) or a symmetric l2
    iqe_components: int = 64                                # IQE's components, combined by iqe_reduction
    iqe_dim_per_component: int = 32                         # intervals per component (head input = the product)
    iqe_reduction: Literal["sum", "maxmean"] = "maxmean"    # sum, or alpha * max + (1 - alpha) * mean, alpha learned
    l2_dim: int = 2048                                      # the projector's output for the l2 head
    dynamics_hidden: tuple[int, ...] = (512, 512)           # T's hidden widths: z' = z + T(z, a)
    num_critics: int = 2                                    # critics (own inits); the actor minimises their max
    actor_hidden: tuple[int, ...] = (512, 512)              # the tanh-Gaussian actor's hidden widths
    # Objective (eq. 4.12, C.24).
    phi_offset: float = 15.0                                # push term phi(d) = -softplus(phi_offset - d, phi_beta)
    phi_beta: float = 0.1                                   # its sharpness: distances past the offset weigh less
    epsilon: float = 0.25                                   # constraint slack: E[relu(d(s, s') - cost)^2] <= epsilon^2
    lagrange_init: float = 0.01                             # the multiplier lambda's initial value
    transition_weight: float = 0.2                          # weight of T's loss (0.1 for image observations)
    bc_weight: float = 0.0          # > 0 adds bc_weight * E[-log pi(a | s, g_bc)] (offline; g_bc = batch["bc_goals"] or goals)
    adaptive_entropy: bool = True   # False: no entropy term in the actor loss (C.3.2's offline maze2d runs)
    # "batch_mean": the actor's distance term divided by its (stop-gradient) batch mean, as OGBench's QRL does, so
    # the loss is scale-free and bc_weight weighs behaviour cloning against a unit-sized term; "none": as the paper.
    actor_distance_scale: Literal["none", "batch_mean"] = "none"
    # Optimisation (Adam).
    critic_learning_rate: float = 1e-4                      # f, projector, head and T
    lagrange_learning_rate: float = 1e-2                    # lambda (gradient ascent on the constraint)
    actor_learning_rate: float = 3e-5                       # the actor
    entropy_init: float = 1.0                               # the entropy weight's initial value (adaptive_entropy)
    entropy_learning_rate: float = 3e-4                     # the entropy weight's, towards target_entropy
    target_entropy: float | None = None                     # None: -action_dim
    # Networks (critics and actor) compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state,
    # latents, IQE and the losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim", "num_critics"))  # and widths, learning rates
        check_critic_fields(self)
        if self.entropy_init <= 0:
            raise ValueError(f"QRLContinuousConfig.entropy_init must be > 0, got {self.entropy_init}")
        if self.actor_distance_scale not in ("none", "batch_mean"):
            raise ValueError("QRLContinuousConfig.actor_distance_scale must be 'none' or 'batch_mean', got "
                             f"{self.actor_distance_scale!r}")

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.image_shape) if self.image_shape is not None else (self.obs_dim,)

    @property
    def critic_config(self) -> QuasimetricCriticConfig:
        """Each critic's config (the critics differ only in their initialisation)."""
        return QuasimetricCriticConfig.of(self)

    @property
    def entropy_target(self) -> float:
        return -float(self.action_dim) if self.target_entropy is None else self.target_entropy


# C.3.2's offline objective (maze2d): phi(x) = -softplus(500 - x, beta=0.01), transition weight 1, lambda lr 0.01, critic lr
# 5e-4, behaviour cloning of weight 0.05 on the dataset action's negative log-likelihood, no entropy term.
OFFLINE_OBJECTIVE = dict(transition_weight=1.0, phi_offset=500.0, phi_beta=0.01, lagrange_learning_rate=0.01,
                         critic_learning_rate=5e-4, bc_weight=0.05, adaptive_entropy=False)

def uses_online_objective(config: QRLContinuousConfig) -> bool:
    """Whether ``config``'s objective is the online one (every field of :data:`OFFLINE_OBJECTIVE` at the config's
    default, C.3.3's Fetch settings: no behaviour cloning, phi offset 15, an entropy term): the objective a config
    built without a preset has, which fails on offline data (``train_offline`` refuses it unless told otherwise)."""
    defaults = {f.name: f.default for f in dataclasses.fields(QRLContinuousConfig)}
    return all(getattr(config, name) == defaults[name] for name in OFFLINE_OBJECTIVE)


# Named regimes, as config fields: agents.make("qrl_continuous", preset="offline", obs_dim=..., action_dim=...).
PRESETS: dict[str, dict] = {
    # C.3.3's state-based Fetch settings (the config's defaults): online, relabelled goals.
    "online": {},
    # Offline on your own dataset: C.3.2's objective with the actor's distance term divided by its batch mean (as
    # OGBench's QRL), so BC weighs against a unit-sized term; 2 x 128 networks, IQE-maxmean 16 x 16 on a 64-d latent,
    # actor lr 3e-4 (sizes for a 2-core machine; measured in docs/results.md, "QRL settings on a small own dataset").
    # Train with critic goals = random dataset states and BC goals = future states
    # (envs.replay.SegmentGoalSampler(p_future=0.0, bc_goals=True)).
    "offline": dict(OFFLINE_OBJECTIVE, actor_learning_rate=3e-4, actor_distance_scale="batch_mean",
                    encoder_hidden=(128, 128), latent_dim=64, projector_hidden=(128,), iqe_components=16,
                    iqe_dim_per_component=16, dynamics_hidden=(128, 128), actor_hidden=(128, 128)),
}


# C.3.3's changes for 64x64 image observations (use with OnlineConfig(obs="image", updates_per_cycle=125)).
IMAGE_DEFAULTS = dict(image_shape=(64, 64, 3), encoder_hidden=(512,), transition_weight=0.1)


def validate_batch(batch: Batch, config: QRLContinuousConfig) -> None:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"batch is missing keys {missing}; expected {list(BATCH_KEYS)}")
    if batch["observations"].ndim != 1 + len(config.obs_shape):
        raise ValueError(f"batch['observations'] must have shape (B, {', '.join(map(str, config.obs_shape))}), "
                         f"got {batch['observations'].shape}")
    b = batch["observations"].shape[0]
    if b == 0:
        raise ValueError(f"batch['observations'] has batch size B = 0 (shape {batch['observations'].shape}); "
                         "update needs B >= 1 rows")
    obs = (b, *config.obs_shape)
    expected = dict(observations=obs, next_observations=obs, goals=obs, actions=(b, config.action_dim), rewards=(b,))
    if "bc_goals" in batch:
        expected["bc_goals"] = obs
    for key, shape in expected.items():
        if batch[key].shape != shape:
            raise ValueError(f"batch[{key!r}] must have shape {shape}, got {batch[key].shape}")


@functools.cache  # equal configs, the same optimizer objects (see platonic_rl.common.train_state)
def _optimizers(c: QRLContinuousConfig) -> dict[str, optax.GradientTransformation]:
    # The networks' Adam on their parameters flattened into one vector: the same update as a few large operations
    # instead of several per parameter array (the update compiles faster); the scalars' Adam as it is.
    return dict(critic=optax.flatten(optax.adam(c.critic_learning_rate)), lagrange=optax.adam(c.lagrange_learning_rate),
                actor=optax.flatten(optax.adam(c.actor_learning_rate)), entropy=optax.adam(c.entropy_learning_rate))


class QRLContinuousAgent(StatelessPolicy, flax.struct.PyTreeNode):
    critic_state: TrainState    # critic_params, stacked over critics: every leaf has a leading [num_critics] axis
    lagrange_state: TrainState  # lagrange_raw [num_critics]
    actor_state: TrainState     # actor_params
    entropy_state: TrainState   # log_entropy_weight
    rng: jax.Array
    config: QRLContinuousConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: QRLContinuousConfig, seed: int | jax.Array = 0) -> "QRLContinuousAgent":
        rng = as_key(seed)
        rng, critic_key, actor_key = jax.random.split(rng, 3)
        obs, act = jnp.zeros((1, *config.obs_shape)), jnp.zeros((1, config.action_dim))
        critic_params = jax.vmap(lambda k: QuasimetricCritic(config.critic_config).init(k, obs, act))(
            jax.random.split(critic_key, config.num_critics))
        actor_params = cls.policy_module(config).init(actor_key, obs, obs)
        lagrange_raw = jnp.full((config.num_critics,), jnp.log(jnp.expm1(config.lagrange_init)), jnp.float32)
        log_entropy_weight = jnp.log(jnp.float32(config.entropy_init))
        tx = _optimizers(config)
        return cls(critic_state=TrainState.create(critic_params, tx["critic"]),
                   lagrange_state=TrainState.create(lagrange_raw, tx["lagrange"]),
                   actor_state=TrainState.create(actor_params, tx["actor"]),
                   entropy_state=TrainState.create(log_entropy_weight, tx["entropy"]), rng=rng, config=config)

    # The parameters, read from their train states.
    critic_params = property(lambda self: self.critic_state.params)
    lagrange_raw = property(lambda self: self.lagrange_state.params)
    actor_params = property(lambda self: self.actor_state.params)
    log_entropy_weight = property(lambda self: self.entropy_state.params)

    @property
    def critic(self) -> QuasimetricCritic:
        return QuasimetricCritic(self.config.critic_config)

    @property
    def policy(self) -> GoalConditionedPolicy:
        return self.policy_module(self.config)

    @staticmethod
    def policy_module(config: QRLContinuousConfig) -> GoalConditionedPolicy:
        return GoalConditionedPolicy(config.actor_hidden, config.action_dim, image=config.image_shape is not None,
                                     dtype=compute_dtype(config))

    # ---------------------------------------------------------------------------------- losses
    def critic_loss(self, params, lagrange_raw, batch: Batch):
        """One critic: eq. 4.12 with random goals (the batch's goals rolled by one) + transition loss
        (:func:`~platonic_rl.agents.qrl.quasimetric_critic_loss`)."""
        return quasimetric_critic_loss(self.config.critic_config, params, lagrange_raw, batch["observations"],
                                       batch["next_observations"], jnp.roll(batch["goals"], 1, axis=0),
                                       batch["actions"], batch["rewards"])

    def goal_distances_after(self, critic_params, observations, actions, goals) -> jax.Array:
        """d_i(T_i(f_i(s), a), f_i(g)) for every critic: ``[num_critics, ...]``."""
        critic = self.critic

        def encode(params, x):
            return critic.apply(params, x, method="encode")

        def one(params):  # observations and goals of one shape encoded in one pass, as the critic loss does
            z, z_goal = (jnp.split(encode(params, jnp.concatenate([observations, goals])), 2)
                         if observations.shape == goals.shape else (encode(params, observations), encode(params, goals)))
            z_pred = critic.apply(params, z, actions, method="dynamics")
            return critic.apply(params, z_pred, z_goal, method="distance")

        return jax.vmap(one)(critic_params)

    def goal_distances(self, observations, goals) -> jax.Array:
        """d_i(f_i(s), f_i(g)) for every critic: ``[num_critics, ...]`` (the learned cost-to-go, -V*)."""
        critic = self.critic

        def one(params):
            z, z_goal = (critic.apply(params, x, method="encode") for x in (observations, goals))
            return critic.apply(params, z, z_goal, method="distance")

        return jax.vmap(one)(self.critic_params)

    def plan_costs(self, observations, goals, action_sequences) -> jax.Array:
        """The cost of each action sequence ``[K, H, A]`` from one observation ``[D]`` towards one goal ``[D]``
        in the learned model: sum_t max_i d_i(T_i(z_t, a_t), f_i(g)), z_0 = f_i(s), z_{t+1} = T_i(z_t, a_t) --
        the learned Q* as the per-step cost (C.3.2's MPPI with the QRL value). Returns ``[K]``."""
        critic = self.critic
        k = action_sequences.shape[0]

        def one(params):
            z = jnp.broadcast_to(critic.apply(params, observations[None], method="encode"), (k, self.config.latent_dim))
            z_goal = critic.apply(params, goals[None], method="encode")

            def step(z, actions):
                z_next = critic.apply(params, z, actions, method="dynamics")
                return z_next, critic.apply(params, z_next, jnp.broadcast_to(z_goal, z_next.shape), method="distance")

            return jax.lax.scan(step, z, jnp.swapaxes(action_sequences, 0, 1))[1]  # [H, K]

        return jax.vmap(one)(self.critic_params).max(0).sum(0)

    def actor_loss_fn(self, actor_params, critic_params, batch: Batch, key):
        mean, log_std = self.policy.apply(actor_params, batch["observations"], batch["goals"])
        actions, log_probs = tanh_normal_sample(key, mean, log_std)
        distances = self.goal_distances_after(jax.lax.stop_gradient(critic_params), batch["observations"],
                                              actions, batch["goals"])
        entropy_weight = jnp.exp(self.log_entropy_weight) if self.config.adaptive_entropy else 0.0
        scale = 1.0
        if self.config.actor_distance_scale == "batch_mean":
            scale = jax.lax.stop_gradient(jnp.mean(jnp.abs(distances.max(0))) + 1e-6)
        loss = losses.actor_loss(distances / scale, log_probs, entropy_weight)
        metrics = {}
        if self.config.bc_weight:
            if "bc_goals" in batch:  # behaviour cloning towards other goals (e.g. future states): its own forward pass
                mean, log_std = self.policy.apply(actor_params, batch["observations"], batch["bc_goals"])
            bc = -jnp.mean(tanh_normal_log_prob(mean, log_std, batch["actions"]))
            loss, metrics = loss + self.config.bc_weight * bc, dict(bc_nll=bc)
        return loss, dict(actor_loss=loss, log_prob=log_probs.mean(), actor_distance=distances.max(0).mean(), **metrics)

    # ---------------------------------------------------------------------------------- update
    def update(self, batch: Batch) -> tuple["QRLContinuousAgent", dict[str, jax.Array]]:
        """One step on the critics and multipliers, then the actor (against the updated critics), then
        the entropy weight. Pure and jit-able; ``batch`` entries may be arrays or nested lists."""
        batch = as_batch(batch, (*BATCH_KEYS, "bc_goals"))
        validate_batch(batch, self.config)
        rng, actor_key = jax.random.split(self.rng)

        def critics_total(params, lagrange_raw):
            totals, metrics = jax.vmap(self.critic_loss, in_axes=(0, 0, None))(params, lagrange_raw, batch)
            return totals.sum(), metrics

        (c_grads, l_grads), critic_metrics = jax.grad(critics_total, argnums=(0, 1), has_aux=True)(
            self.critic_params, self.lagrange_raw)
        critic_state = self.critic_state.apply_gradients(c_grads)
        lagrange_state = self.lagrange_state.apply_gradients(l_grads)

        a_grads, actor_metrics = jax.grad(self.actor_loss_fn, has_aux=True)(
            self.actor_params, critic_state.params, batch, actor_key)
        actor_state = self.actor_state.apply_gradients(a_grads)

        entropy_state = self.entropy_state
        if self.config.adaptive_entropy:
            e_grad = jax.grad(entropy_weight_loss)(self.log_entropy_weight, actor_metrics["log_prob"],
                                                   self.config.entropy_target)
            entropy_state = entropy_state.apply_gradients(e_grad)

        metrics = {f"critic{i}/{k}": v[i] for k, v in critic_metrics.items() for i in range(self.config.num_critics)}
        metrics.update(actor_metrics, entropy_weight=jnp.exp(entropy_state.params) * self.config.adaptive_entropy,
                       critic_grad_norm=optax.global_norm(c_grads), actor_grad_norm=optax.global_norm(a_grads))
        agent = self.replace(critic_state=critic_state, lagrange_state=lagrange_state, actor_state=actor_state,
                             entropy_state=entropy_state, rng=rng)
        return agent, metrics

    # ------------------------------------------------------------------------------ inference
    def act(self, observations: jax.Array, goals: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        """A sample of pi(. | s, g) if ``rng`` (a PRNG key or an int seed) is given, else its mode tanh(mu);
        in [-1, 1]^A."""
        observations, goals = jnp.asarray(observations), jnp.asarray(goals)
        for name, x in (("observations", observations), ("goals", goals)):
            shape = self.config.obs_shape
            if x.shape[x.ndim - len(shape):] != shape:
                raise ValueError(f"{name} must have shape [..., {', '.join(map(str, shape))}], got {x.shape}")
        observations, goals = jnp.broadcast_arrays(observations, goals)
        mean, log_std = self.policy.apply(self.actor_params, observations, goals)
        if rng is None:
            return jnp.tanh(mean)
        return tanh_normal_sample(as_key(rng), mean, log_std)[0]
