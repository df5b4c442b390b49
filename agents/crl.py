"""Contrastive RL (Eysenbach et al. 2022), as a jit-able pytree agent (a baseline for online GCRL).

    agent = CRLAgent.create(CRLConfig(obs_dim=10, action_dim=4), seed=0)
    agent, metrics = jax.jit(CRLAgent.update)(agent, batch)   # observations, actions, goals
    actions = jax.jit(CRLAgent.act)(agent, observations, goals, rng)

Critic: f(s, a) = <phi(s, a), psi(g)> trained by binary NCE (:func:`platonic_rl.replearn.objectives.binary_nce`) with
the other rows' goals as negatives; goals must be future states of the same trajectory (the replay
buffer's truncated-geometric relabelling), so f estimates the log discounted occupancy ratio. Actor: a
tanh-Normal policy maximising f(s, pi(s, g), g), with an optional entropy term (used for images in the
original).
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
from platonic_rl.common.losses import sac_actor_loss
from platonic_rl.common.networks import MLP, compute_dtype
from platonic_rl.common.policies import TanhNormalPolicy, tanh_normal_log_prob, tanh_normal_sample
from platonic_rl.common.train_state import TrainState
from platonic_rl.replearn.objectives import binary_nce, info_nce

Batch = dict[str, jax.Array]
BATCH_KEYS = ("observations", "actions", "goals")


@dataclasses.dataclass(frozen=True)
class CRLConfig:
    obs_dim: int = 10                          # state size (a goal is a state of the same size)
    action_dim: int = 4                        # continuous actions in [-1, 1]^action_dim
    hidden: tuple[int, ...] = (256, 256)       # hidden widths of both encoders, phi(s, a) and psi(g)
    repr_dim: int = 64                         # their output: f(s, a, g) = <phi(s, a), psi(g)>
    actor_hidden: tuple[int, ...] = (256, 256)  # the tanh-Normal actor's hidden widths
    objective: str = "binary_nce"              # the critic's loss: "binary_nce" (the original's) or "infonce"
    critic_learning_rate: float = 3e-4         # Adam's, for both encoders
    actor_learning_rate: float = 3e-4          # Adam's, for the actor
    entropy_weight: float = 0.0                # weight of E[log pi] in the actor loss (0: none, as for states)
    bc_weight: float = 0.0  # > 0 adds bc_weight E[-log pi(a | s, g)] to the actor loss (offline, C.3.2: 0.05)
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim", "repr_dim"))  # and hidden widths, learning rates
        compute_dtype(self)  # a known compute_dtype
        if self.objective not in ("binary_nce", "infonce"):
            raise ValueError(f"CRLConfig.objective must be 'binary_nce' or 'infonce', got {self.objective!r}")
        if not self.bc_weight >= 0:
            raise ValueError(f"CRLConfig.bc_weight must be >= 0, got {self.bc_weight}")


def validate_batch(batch: Batch, config: CRLConfig) -> None:
    """Keys and shapes (static, so free under jit): observations and goals [B, obs_dim], actions
    [B, action_dim], B >= 1."""
    missing = [k for k in BATCH_KEYS if k not in batch]
    if missing:
        raise ValueError(f"batch is missing keys {missing}; expected {list(BATCH_KEYS)}")
    obs = batch["observations"]
    if obs.ndim != 2 or obs.shape[1] != config.obs_dim:
        raise ValueError(f"batch['observations'] must be [B, {config.obs_dim}], got {obs.shape}")
    b = obs.shape[0]
    if b == 0:
        raise ValueError(f"batch['observations'] has batch size B = 0 (shape {obs.shape}); update needs B >= 1 rows")
    for key, shape in (("goals", (b, config.obs_dim)), ("actions", (b, config.action_dim))):
        if batch[key].shape != shape:
            raise ValueError(f"batch[{key!r}] must have shape {shape}, got {batch[key].shape}")


class ContrastiveCritic(nn.Module):
    config: CRLConfig

    def setup(self):
        c = self.config
        self.sa_encoder = MLP(c.hidden, c.repr_dim, dtype=compute_dtype(c))
        self.g_encoder = MLP(c.hidden, c.repr_dim, dtype=compute_dtype(c))

    def __call__(self, observations, actions, goals):
        """Critic matrix ``[B, B]``: logits[i, j] = <phi(s_i, a_i), psi(g_j)>."""
        phi = self.sa_encoder(jnp.concatenate([observations, actions], -1))
        psi = self.g_encoder(goals)
        return phi @ psi.T

    def diagonal(self, observations, actions, goals):
        """f(s_i, a_i, g_i) only: ``[B]``."""
        phi = self.sa_encoder(jnp.concatenate([observations, actions], -1))
        return jnp.sum(phi * self.g_encoder(goals), -1)


@functools.cache  # equal configs, the same optimizer objects (see platonic_rl.common.train_state)
def _optimizers(c: CRLConfig) -> tuple[optax.GradientTransformation, optax.GradientTransformation]:
    return optax.adam(c.critic_learning_rate), optax.adam(c.actor_learning_rate)


class CRLAgent(StatelessPolicy, flax.struct.PyTreeNode):
    critic_state: TrainState  # critic_params
    actor_state: TrainState   # actor_params
    rng: jax.Array
    config: CRLConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: CRLConfig, seed: int | jax.Array = 0) -> "CRLAgent":
        rng = as_key(seed)
        rng, critic_key, actor_key = jax.random.split(rng, 3)
        obs, act = jnp.zeros((1, config.obs_dim)), jnp.zeros((1, config.action_dim))
        critic_params = ContrastiveCritic(config).init(critic_key, obs, act, obs)
        actor_params = TanhNormalPolicy(config.actor_hidden, config.action_dim, compute_dtype(config)).init(
            actor_key, jnp.zeros((1, 2 * config.obs_dim)))
        critic_tx, actor_tx = _optimizers(config)
        return cls(critic_state=TrainState.create(critic_params, critic_tx),
                   actor_state=TrainState.create(actor_params, actor_tx), rng=rng, config=config)

    # The parameters, read from their train states.
    critic_params = property(lambda self: self.critic_state.params)
    actor_params = property(lambda self: self.actor_state.params)

    @property
    def critic(self) -> ContrastiveCritic:
        return ContrastiveCritic(self.config)

    @property
    def policy(self) -> TanhNormalPolicy:
        return TanhNormalPolicy(self.config.actor_hidden, self.config.action_dim, compute_dtype(self.config))

    def critic_loss(self, params, batch: Batch):
        logits = self.critic.apply(params, batch["observations"], batch["actions"], batch["goals"])
        loss = binary_nce(logits) if self.config.objective == "binary_nce" else info_nce(logits, "forward")
        correct = jnp.mean(jnp.argmax(logits, axis=1) == jnp.arange(logits.shape[0]))
        return loss, dict(critic_loss=loss, categorical_accuracy=correct, logits_positive=jnp.diag(logits).mean())

    def actor_loss(self, actor_params, critic_params, batch: Batch, key):
        """-E[f(s, a, g)] + entropy_weight E[log pi(a | s, g)],  a ~ pi(. | s, g): SAC's actor loss with the
        critic f as Q and a fixed entropy weight; + bc_weight E[-log pi(a_data | s, g)] (the dataset action's
        negative log-likelihood, as Contrastive RL's offline code) if bc_weight > 0."""
        obs, goals = batch["observations"], batch["goals"]
        mean, log_std = self.policy.apply(actor_params, jnp.concatenate([obs, goals], -1))
        actions, log_probs = tanh_normal_sample(key, mean, log_std)
        q = self.critic.apply(jax.lax.stop_gradient(critic_params), obs, actions, goals, method="diagonal")
        loss = sac_actor_loss(q[None], log_probs, self.config.entropy_weight)
        metrics = dict(actor_q=q.mean())
        if self.config.bc_weight:
            bc = -jnp.mean(tanh_normal_log_prob(mean, log_std, batch["actions"]))
            loss, metrics["bc_nll"] = loss + self.config.bc_weight * bc, bc
        return loss, dict(actor_loss=loss, **metrics)

    def update(self, batch: Batch) -> tuple["CRLAgent", dict[str, jax.Array]]:
        """One critic step, then one actor step (pure, jit-able); ``batch`` entries may be arrays or lists."""
        batch = as_batch(batch, BATCH_KEYS)
        validate_batch(batch, self.config)
        rng, key = jax.random.split(self.rng)
        c_grads, critic_metrics = jax.grad(self.critic_loss, has_aux=True)(self.critic_params, batch)
        critic_state = self.critic_state.apply_gradients(c_grads)
        a_grads, actor_metrics = jax.grad(self.actor_loss, has_aux=True)(self.actor_params, critic_state.params,
                                                                         batch, key)
        agent = self.replace(critic_state=critic_state, actor_state=self.actor_state.apply_gradients(a_grads),
                             rng=rng)
        return agent, {**critic_metrics, **actor_metrics}

    def act(self, observations: jax.Array, goals: jax.Array, rng: jax.Array | None = None) -> jax.Array:
        """A sample of pi(. | s, g) if ``rng`` (a PRNG key or an int seed) is given, else its mode; in [-1, 1]^A."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        if observations.shape[-1] != self.config.obs_dim:
            raise ValueError(f"observations and goals must have shape [..., {self.config.obs_dim}], got "
                             f"{observations.shape}")
        mean, log_std = self.policy.apply(self.actor_params, jnp.concatenate([observations, goals], -1))
        return jnp.tanh(mean) if rng is None else tanh_normal_sample(as_key(rng), mean, log_std)[0]
