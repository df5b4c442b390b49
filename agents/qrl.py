"""Quasimetric RL agent (dissertation chapter 4) as an immutable, jit-able pytree.

    agent = QRLAgent.create(QRLConfig(obs_dim=3, num_actions=3), seed=0)
    agent, metrics = jax.jit(QRLAgent.update)(agent, batch)     # batch: observations, actions,
                                                                # next_observations, rewards
    actions = jax.jit(QRLAgent.act)(agent, observations, goals)

Model (section 4.3.4): encoder f: s -> z; a quasimetric d_z(z1, z2) = head(proj(z1), proj(z2)) with an IQE
(or, for the ablation, symmetric l2) head; a residual latent dynamics T(z, a) = z + g(z, a) whose last
layer starts at zero (C.23). Discrete actions act greedily: argmin_a d_z(T(f(s), a), f(g)).

Goals (C.26): with ``goal_mode='multi'`` each row's goal is another row's next state (the batch's next
states rolled by one), replaced by the general goal with probability ``p_general_goal``; with
``goal_mode='single'`` it is always the general goal.

The critic -- :class:`QuasimetricCriticConfig`, :class:`QuasimetricCritic` and its loss
:func:`quasimetric_critic_loss` -- does not depend on the action type beyond the action features it is
given (one-hot here), and is shared with :class:`~platonic_rl.agents.qrl_continuous.QRLContinuousAgent`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.common.networks import MLP, AtariConvBackbone, compute_dtype
from platonic_rl.common.train_state import TrainState
from platonic_rl.qrl import losses
from platonic_rl.qrl.quasimetrics import make_head

Batch = dict[str, jax.Array]
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards")


# ---------------------------------------------------------------------- critic (shared with QRLContinuous)


@dataclasses.dataclass(frozen=True)
class QuasimetricCriticConfig:
    """One quasimetric critic: its networks, inputs and objective. The agent configs carry these fields flat,
    with their own defaults, and build this from them (``config.critic_config``)."""

    # Networks (section 4.3.4): encoder f, projector + quasimetric head d_z, residual latent dynamics T.
    encoder_hidden: tuple[int, ...]            # f's hidden widths (state -> latent)
    latent_dim: int                            # the latent z = f(s) that T steps and the head compares
    projector_hidden: tuple[int, ...]          # the projector's hidden widths (latent -> head input)
    head: Literal["iqe", "l2"]                 # the distance: IQE (a quasimetric) or a symmetric l2
    iqe_components: int                        # IQE's components, combined by iqe_reduction
    iqe_dim_per_component: int                 # intervals per component (head input = the product)
    iqe_reduction: Literal["sum", "maxmean"]   # sum, or alpha * max + (1 - alpha) * mean, alpha learned
    l2_dim: int                                # projector output for the l2 head
    dynamics_hidden: tuple[int, ...]           # T's hidden widths: z' = z + T(z, a)
    # Objective (eq. 4.12, C.24).
    phi_offset: float                          # push term phi(d) = -softplus(phi_offset - d, phi_beta)
    phi_beta: float                            # its sharpness: distances past the offset weigh less
    epsilon: float                             # constraint slack: E[relu(d(s, s') - cost)^2] <= epsilon^2
    lagrange_init: float                       # the multiplier lambda's initial value
    transition_weight: float                   # weight of T's loss
    # Inputs: states or, with image_shape set, images.
    obs_center: tuple[float, ...] | None = None  # f reads (obs - obs_center) * obs_scale
    obs_scale: tuple[float, ...] | None = None   # None: no centring / scaling
    image_shape: tuple[int, int, int] | None = None  # (H, W, C) for image observations
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state, latents, the head
    # and the losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self)  # hidden widths >= 1
        check_critic_fields(self)

    @classmethod
    def of(cls, config: Any, **given) -> "QuasimetricCriticConfig":
        """The critic part of an agent ``config``: every field of this class read from ``config`` by name,
        except those ``given`` here (the ones ``config`` does not have)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if f.name not in given},
                   **given)

    @property
    def head_dim(self) -> int:
        """The projector's output size: IQE components x dimensions per component, or ``l2_dim``."""
        return self.iqe_components * self.iqe_dim_per_component if self.head == "iqe" else self.l2_dim


def check_critic_fields(config: Any) -> None:
    """The critic fields' checks, for :class:`QuasimetricCriticConfig` and for the agent configs that carry
    them (so that errors name the class the user built): latent and IQE sizes >= 1, a known head, epsilon and
    lagrange_init > 0. Raises ``ValueError`` naming ``ConfigClass.field``."""
    owner = type(config).__name__
    for name in ("latent_dim", "iqe_components", "iqe_dim_per_component", "l2_dim"):
        if getattr(config, name) < 1:
            raise ValueError(f"{owner}.{name} must be >= 1, got {getattr(config, name)}")
    if config.head not in ("iqe", "l2"):
        raise ValueError(f"{owner}.head must be 'iqe' or 'l2', got {config.head!r}")
    if config.epsilon <= 0 or config.lagrange_init <= 0:
        raise ValueError(f"{owner}.epsilon and lagrange_init must be > 0, got {config.epsilon}, "
                         f"{config.lagrange_init}")
    compute_dtype(config)  # a known compute_dtype


class QuasimetricCritic(nn.Module):
    """Encoder f, quasimetric d_z (projector + head) and residual latent dynamics T."""

    config: QuasimetricCriticConfig

    def setup(self):
        c = self.config
        dtype = compute_dtype(c)
        self.encoder = MLP(c.encoder_hidden, c.latent_dim, dtype=dtype)
        self.projector = MLP(c.projector_hidden, c.head_dim, dtype=dtype)
        head_kwargs = (dict(dim_per_component=c.iqe_dim_per_component, reduction=c.iqe_reduction)
                       if c.head == "iqe" else {})
        self.head = make_head(c.head, **head_kwargs)
        self.residual = MLP(c.dynamics_hidden, c.latent_dim, zero_init_last=True, dtype=dtype)
        self.backbone = AtariConvBackbone(dtype=dtype) if c.image_shape is not None else None

    def encode(self, obs):
        c = self.config
        if self.backbone is not None:  # images: f = MLP(conv features)
            return self.encoder(self.backbone(obs))
        if c.obs_center is not None:
            obs = obs - jnp.asarray(c.obs_center, obs.dtype)
        if c.obs_scale is not None:
            obs = obs * jnp.asarray(c.obs_scale, obs.dtype)
        return self.encoder(obs)

    def distance(self, z1, z2):
        """d_z(z1, z2): the head on the projected latents."""
        return self.head(self.projector(z1), self.projector(z2))

    def project(self, z):
        """The projector alone (:meth:`distance` is ``head_distance(project(z1), project(z2))``)."""
        return self.projector(z)

    def head_distance(self, p1, p2):
        """The head alone, on projected latents."""
        return self.head(p1, p2)

    def dynamics(self, z, action_features):
        """T(z, a) = z + g(z, a)   (C.23)."""
        return z + self.residual(jnp.concatenate([z, action_features], axis=-1))

    def __call__(self, obs, action_features):  # used once, to initialise every submodule
        z = self.encode(obs)
        return self.distance(z, self.dynamics(z, action_features))


def quasimetric_critic_loss(config: QuasimetricCriticConfig, params, lagrange_raw: jax.Array,
                            observations: jax.Array, next_observations: jax.Array, goals: jax.Array,
                            action_features: jax.Array, rewards: jax.Array, mask: jax.Array | None = None
                            ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Eq. 4.12 plus ``transition_weight`` x the transition loss, for one critic; returns (total, metrics).

    Row i pairs the state s_i with the goal g_i (pushed apart) and is the transition (s_i, a_i, s'_i, r_i)
    (d(s, s') <= -r, and T(f(s), a) fit to f(s')); ``mask`` (default: every row) selects the rows whose
    transition has an action, for the transition loss."""
    critic = QuasimetricCritic(config)
    b = observations.shape[0]
    z_all = critic.apply(params, jnp.concatenate([observations, next_observations, goals]), method="encode")
    z, z_next, z_goal = z_all[:b], z_all[b:2 * b], z_all[2 * b:]
    z_pred = critic.apply(params, z, action_features, method="dynamics")
    # The four distances the losses read, d(z, z_goal), d(z, z'), d(z'_pred, z') and d(z', z'_pred): every latent
    # projected once and every pair through the head in one call (fewer, larger matrix products; the same values).
    p, p_next, p_goal, p_pred = jnp.split(critic.apply(params, jnp.concatenate([z, z_next, z_goal, z_pred]),
                                                       method="project"), 4)
    d_goal, d_transition, d_forward, d_backward = jnp.split(
        critic.apply(params, jnp.concatenate([p, p, p_pred, p_next]), jnp.concatenate([p_goal, p_next, p_next, p_pred]),
                     method="head_distance"), 4)

    push = losses.push_loss(d_goal, lambda d: losses.softplus_phi(d, config.phi_offset, config.phi_beta))
    violation = losses.constraint_violation(d_transition, rewards)
    model_term, multiplier_loss, lam = losses.lagrangian_terms(violation, lagrange_raw, config.epsilon)
    transition = losses.transition_loss_of(d_forward, d_backward, mask)

    total = push + model_term + config.transition_weight * transition + multiplier_loss
    metrics = dict(loss=total, push_loss=push, violation=violation, lagrange_multiplier=lam,
                   transition_loss=transition, mean_goal_distance=d_goal.mean(),
                   mean_transition_distance=d_transition.mean())
    return total, metrics


# ------------------------------------------------------------------------------------------ config


@dataclasses.dataclass(frozen=True)
class QRLConfig:
    """Defaults are the paper-scale MountainCar settings of appendix C.3.1."""

    obs_dim: int = 3                                        # state size (a goal is a state of the same size)
    num_actions: int = 3                                    # discrete actions; Q(s, a, g) = d(T(f(s), a), f(g))
    # Networks.
    obs_center: tuple[float, ...] | None = None             # encoder input = (obs - obs_center) * obs_scale
    obs_scale: tuple[float, ...] | None = None              # None: no centring / scaling
    encoder_hidden: tuple[int, ...] = (1024, 1024, 1024)    # f's hidden widths (state -> latent)
    latent_dim: int = 256                                   # the latent z = f(s) that T steps and the head compares
    projector_hidden: tuple[int, ...] = (1024, 1024, 1024)  # the projector's hidden widths (latent -> head input)
    head: Literal["iqe", "l2"] = "iqe"                      # the distance: IQE (a quasimetric) or a symmetric l2
    iqe_components: int = 16                                # IQE's components, combined by iqe_reduction
    iqe_dim_per_component: int = 32                         # intervals per component (head input = the product)
    iqe_reduction: Literal["sum", "maxmean"] = "maxmean"    # sum, or alpha * max + (1 - alpha) * mean, alpha learned
    l2_dim: int = 256                                       # projector output for the l2 head
    dynamics_hidden: tuple[int, ...] = (1024, 1024, 1024)   # T's hidden widths: z' = z + T(z, a)
    # Objective (eq. 4.12, C.24).
    phi_offset: float = 500.0                               # push term phi(d) = -softplus(phi_offset - d, phi_beta)
    phi_beta: float = 0.01                                  # its sharpness: distances past the offset weigh less
    epsilon: float = 0.25                                   # constraint slack: E[relu(d(s, s') - cost)^2] <= epsilon^2
    lagrange_init: float = 0.01                             # the multiplier lambda's initial value
    transition_weight: float = 75.0                         # weight of T's loss
    # Optimisation.
    learning_rate: float = 5e-4                             # Adam's, for f, projector, head and T
    lagrange_learning_rate: float = 0.3                     # lambda's (gradient ascent on the constraint)
    cosine_decay_steps: int | None = 500_000  # cosine to 0 over this many updates; None = constant
    # Goals (C.26).
    goal_mode: Literal["multi", "single"] = "multi"         # multi: the batch's next states; single: general_goal
    p_general_goal: float = 0.05                            # multi: the share of goals replaced by general_goal
    general_goal: tuple[float, ...] | None = (0.5, 0.0, 1.0)  # its observation (MountainCar: the top, flag 1)
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "num_actions"))  # and widths, learning rates
        check_critic_fields(self)
        if self.goal_mode not in ("multi", "single"):
            raise ValueError(f"QRLConfig.goal_mode must be 'multi' or 'single', got {self.goal_mode!r}")
        if not 0.0 <= self.p_general_goal <= 1.0:
            raise ValueError(f"QRLConfig.p_general_goal must be in [0, 1], got {self.p_general_goal}")
        if self.general_goal is not None and len(self.general_goal) != self.obs_dim:
            raise ValueError(f"QRLConfig.general_goal must have obs_dim={self.obs_dim} entries, got "
                             f"{len(self.general_goal)}: the default (0.5, 0.0, 1.0) is MountainCar's top-of-hill goal "
                             "set; for another environment pass general_goal=None and p_general_goal=0.0 (goals then "
                             "come from the batch), or that environment's own general goal")
        if self.general_goal is None and (self.goal_mode == "single" or self.p_general_goal > 0):
            raise ValueError("QRLConfig.general_goal is None but goal_mode='single' or p_general_goal > 0 "
                             "needs it")
        for name in ("obs_center", "obs_scale"):
            value = getattr(self, name)
            if value is not None and len(value) != self.obs_dim:
                raise ValueError(f"QRLConfig.{name} must have obs_dim={self.obs_dim} entries, got "
                                 f"{len(value)}")

    @property
    def critic_config(self) -> QuasimetricCriticConfig:
        return QuasimetricCriticConfig.of(self, image_shape=None)  # state observations only


# ------------------------------------------------------------------------------------------- agent


@functools.cache  # equal configs, the same optimizer objects (see platonic_rl.common.train_state)
def _optimizers(config: QRLConfig) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    lr = config.learning_rate
    if config.cosine_decay_steps is not None:
        lr = optax.cosine_decay_schedule(config.learning_rate, config.cosine_decay_steps)
    # The networks' Adam on their parameters flattened into one vector (the same update as a few large operations
    # instead of several per parameter array: the update compiles faster); the multiplier's as it is.
    return optax.flatten(optax.adam(lr)), optax.adam(config.lagrange_learning_rate)


def validate_batch(batch: Batch, config: QRLConfig) -> None:
    """Shape/dtype checks (static, so they cost nothing under jit), B >= 1, and -- only when the actions are
    concrete (an eager call, not under jit/vmap/grad, where they are tracers whose values cannot be read) --
    that every action id is in [-1, num_actions) (-1 = no action, for goal-entry transitions). Under jit an
    out-of-range id cannot be detected here (its one-hot would be all zeros, i.e. silently "no action"):
    check whole datasets on the host with :func:`validate_dataset` before training."""
    _check_arrays(batch, config, "batch")


def validate_dataset(data: dict, config: QRLConfig) -> None:
    """Host-side (NumPy) check of a whole offline dataset before training on it under jit: the keys
    observations, actions, next_observations, rewards with shapes [N, obs_dim], [N], [N, obs_dim], [N],
    N >= 1, integer actions, every action id in [-1, num_actions). Raises ``ValueError`` naming
    ``data[key]``."""
    missing = [k for k in BATCH_KEYS if k not in data]
    if missing:
        raise ValueError(f"data is missing keys {missing}; expected {list(BATCH_KEYS)}")
    _check_arrays({k: np.asarray(data[k]) for k in BATCH_KEYS}, config, "data")


def _check_arrays(batch, config: QRLConfig, name: str) -> None:
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"{name} is missing keys {missing}; expected {list(BATCH_KEYS)}")
    obs, act, nxt, rew = (batch[k] for k in BATCH_KEYS)
    if obs.ndim != 2 or obs.shape[1] != config.obs_dim:
        raise ValueError(f"{name}['observations'] must be [B, {config.obs_dim}], got {obs.shape}")
    b = obs.shape[0]
    if b == 0:
        raise ValueError(f"{name}['observations'] has batch size B = 0 (shape {obs.shape}); need B >= 1 rows")
    if nxt.shape != obs.shape:
        raise ValueError(f"{name}['next_observations'] must be {obs.shape}, got {nxt.shape}")
    if act.shape != (b,) or not jnp.issubdtype(act.dtype, jnp.integer):
        raise ValueError(f"{name}['actions'] must be integer [B]=({b},) (-1 = no action), got "
                         f"{act.dtype} {act.shape}")
    if rew.shape != (b,):
        raise ValueError(f"{name}['rewards'] must be [B]=({b},), got {rew.shape}")
    if not isinstance(act, jax.core.Tracer):  # concrete values: check the range (impossible under jit)
        values = np.asarray(act)
        low, high = int(values.min()), int(values.max())
        if low < -1 or high >= config.num_actions:
            bad = values[(values < -1) | (values >= config.num_actions)]
            raise ValueError(f"{name}['actions'] must be action ids in [-1, num_actions={config.num_actions}) "
                             f"(-1 = no action), got {bad.size} out of range, e.g. {int(bad[0])} (min {low}, "
                             f"max {high})")


class QRLAgent(StatelessPolicy, flax.struct.PyTreeNode):
    critic_state: TrainState    # QuasimetricCritic parameters (``params``) and their optimizer
    lagrange_state: TrainState  # ``lagrange_raw``, lambda = softplus(lagrange_raw), and its optimizer
    rng: jax.Array
    config: QRLConfig = flax.struct.field(pytree_node=False)

    # ------------------------------------------------------------------------------- construction
    @classmethod
    @compiled_create
    def create(cls, config: QRLConfig, seed: int | jax.Array = 0) -> "QRLAgent":
        rng = as_key(seed)
        rng, init_key = jax.random.split(rng)
        params = QuasimetricCritic(config.critic_config).init(
            init_key, jnp.zeros((1, config.obs_dim)), jnp.zeros((1, config.num_actions)))
        lagrange_raw = jnp.log(jnp.expm1(jnp.float32(config.lagrange_init)))  # softplus^-1
        tx, lagrange_tx = _optimizers(config)
        return cls(critic_state=TrainState.create(params, tx),
                   lagrange_state=TrainState.create(lagrange_raw, lagrange_tx), rng=rng, config=config)

    # The parameters, read from their train states.
    params = property(lambda self: self.critic_state.params)
    lagrange_raw = property(lambda self: self.lagrange_state.params)

    @property
    def critic(self) -> QuasimetricCritic:
        return QuasimetricCritic(self.config.critic_config)

    @property
    def lagrange_multiplier(self) -> jax.Array:
        return jax.nn.softplus(self.lagrange_raw)

    def _action_features(self, actions: jax.Array) -> jax.Array:
        return jax.nn.one_hot(actions, self.config.num_actions)

    # ---------------------------------------------------------------------------------- losses
    def sample_goals(self, key: jax.Array, next_observations: jax.Array) -> jax.Array:
        """Goals per C.26: the batch's next states rolled by one, or the general goal."""
        c = self.config
        if c.goal_mode == "single":
            return jnp.broadcast_to(jnp.asarray(c.general_goal, jnp.float32), next_observations.shape)
        goals = jnp.roll(next_observations, 1, axis=0)
        if c.p_general_goal > 0:
            use_general = jax.random.bernoulli(key, c.p_general_goal, (goals.shape[0], 1))
            goals = jnp.where(use_general, jnp.asarray(c.general_goal, jnp.float32), goals)
        return goals

    def loss(self, params, lagrange_raw, batch: Batch, goals: jax.Array):
        """Eq. 4.12 plus the weighted transition loss (:func:`quasimetric_critic_loss`); rows with action -1
        (goal entries) have no transition to fit. Returns (total, metrics)."""
        actions = batch["actions"]
        return quasimetric_critic_loss(self.config.critic_config, params, lagrange_raw, batch["observations"],
                                       batch["next_observations"], goals,
                                       self._action_features(jnp.maximum(actions, 0)), batch["rewards"],
                                       mask=actions >= 0)

    # ---------------------------------------------------------------------------------- update
    def update(self, batch: Batch) -> tuple["QRLAgent", dict[str, jax.Array]]:
        """One gradient step on the critic and the Lagrange multiplier (jit-able, pure). ``batch`` entries may be
        arrays or nested lists; see :func:`validate_batch` for what is checked (action ids only outside jit)."""
        batch = as_batch(batch, BATCH_KEYS)
        validate_batch(batch, self.config)
        rng, goal_key = jax.random.split(self.rng)
        goals = self.sample_goals(goal_key, batch["next_observations"])
        grads, metrics = jax.grad(self.loss, argnums=(0, 1), has_aux=True)(
            self.params, self.lagrange_raw, batch, goals)
        metrics["grad_norm"] = optax.global_norm(grads[0])
        agent = self.replace(critic_state=self.critic_state.apply_gradients(grads[0]),
                             lagrange_state=self.lagrange_state.apply_gradients(grads[1]), rng=rng)
        return agent, metrics

    def validate_dataset(self, data: dict) -> None:
        """:func:`validate_dataset` with this agent's config (for training loops that take any agent)."""
        validate_dataset(data, self.config)

    # ------------------------------------------------------------------------------ inference
    def distance(self, observations: jax.Array, goals: jax.Array) -> jax.Array:
        """d(s, g) = d_z(f(s), f(g)) = -V*(s; g) estimate, for matching leading shapes."""
        z = self.critic.apply(self.params, observations, method="encode")
        z_goal = self.critic.apply(self.params, goals, method="encode")
        return self.critic.apply(self.params, z, z_goal, method="distance")

    def action_costs(self, observations: jax.Array, goals: jax.Array) -> jax.Array:
        """-Q(s, a; g) + r = d_z(T(f(s), a), f(g)) for every discrete action: ``[..., num_actions]``."""
        critic, n = self.critic, self.config.num_actions
        z = critic.apply(self.params, observations, method="encode")
        z_goal = critic.apply(self.params, goals, method="encode")
        z = jnp.broadcast_to(z[..., None, :], z.shape[:-1] + (n, z.shape[-1]))
        features = jnp.broadcast_to(jnp.eye(n), z.shape[:-1] + (n,))
        z_pred = critic.apply(self.params, z, features, method="dynamics")
        return critic.apply(self.params, z_pred, z_goal[..., None, :], method="distance")

    def act(self, observations: jax.Array, goals: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        """Greedy discrete action argmin_a d_z(T(f(s), a), f(g)); ``rng`` (a key or an int seed) is unused
        (deterministic)."""
        observations, goals = jnp.asarray(observations), jnp.asarray(goals)
        for name, x in (("observations", observations), ("goals", goals)):
            if x.shape[-1:] != (self.config.obs_dim,):
                raise ValueError(f"{name} must have shape [..., {self.config.obs_dim}], got {x.shape}")
        observations, goals = jnp.broadcast_arrays(observations, goals)
        return jnp.argmin(self.action_costs(observations, goals), axis=-1).astype(jnp.int32)
