"""Goal-conditioned behaviour cloning (a baseline for online GCRL), as a jit-able pytree agent.

The policy pi(a | s, g) (tanh-Normal MLP) maximises the likelihood of the logged action a_t given the
state s_t and a goal g relabelled as a future state of the same trajectory (hindsight relabelling):

    L = -E[log pi(a_t | s_t, g)].
"""
from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import optax

from platonic_rl.agents.common import StatelessPolicy, as_batch, as_key, check_config, compiled_create
from platonic_rl.common.networks import compute_dtype
from platonic_rl.common.policies import TanhNormalPolicy, tanh_normal_log_prob, tanh_normal_sample
from platonic_rl.common.train_state import TrainState


@dataclasses.dataclass(frozen=True)
class GCBCConfig:
    obs_dim: int = 10                     # state size (a goal is a state of the same size)
    action_dim: int = 4                   # continuous actions in [-1, 1]^action_dim
    hidden: tuple[int, ...] = (256, 256)  # the tanh-Normal policy's hidden widths
    learning_rate: float = 3e-4           # Adam's
    # Networks compute in this dtype ("bfloat16" for GPU/TPU); parameters, optimizer state and losses stay float32.
    compute_dtype: str = "float32"

    def __post_init__(self):
        check_config(self, at_least_one=("obs_dim", "action_dim"))  # and hidden widths >= 1, learning_rate > 0
        compute_dtype(self)  # a known compute_dtype


@functools.cache  # equal configs, the same optimizer object (see platonic_rl.common.train_state)
def _optimizer(config: GCBCConfig) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


class GCBCAgent(StatelessPolicy, flax.struct.PyTreeNode):
    policy_state: TrainState  # the policy's parameters (``params``) and their optimizer
    rng: jax.Array
    config: GCBCConfig = flax.struct.field(pytree_node=False)

    @classmethod
    @compiled_create
    def create(cls, config: GCBCConfig, seed: int | jax.Array = 0) -> "GCBCAgent":
        rng = as_key(seed)
        rng, key = jax.random.split(rng)
        params = TanhNormalPolicy(config.hidden, config.action_dim, compute_dtype(config)).init(
            key, jnp.zeros((1, 2 * config.obs_dim)))
        return cls(policy_state=TrainState.create(params, _optimizer(config)), rng=rng, config=config)

    params = property(lambda self: self.policy_state.params)  # the policy's, read from its train state

    @property
    def policy(self) -> TanhNormalPolicy:
        return TanhNormalPolicy(self.config.hidden, self.config.action_dim, compute_dtype(self.config))

    def loss(self, params, batch):
        mean, log_std = self.policy.apply(params, jnp.concatenate([batch["observations"], batch["goals"]], -1))
        nll = -jnp.mean(tanh_normal_log_prob(mean, log_std, batch["actions"]))
        return nll, dict(bc_nll=nll, action_error=jnp.mean(jnp.abs(jnp.tanh(mean) - batch["actions"])))

    def update(self, batch) -> tuple["GCBCAgent", dict[str, jax.Array]]:
        """One likelihood step (pure, jit-able); ``batch`` entries may be arrays or nested lists."""
        batch = as_batch(batch, ("observations", "goals", "actions"))
        for key, dim in (("observations", self.config.obs_dim), ("goals", self.config.obs_dim),
                         ("actions", self.config.action_dim)):
            if key not in batch or batch[key].ndim < 1 or batch[key].shape[-1] != dim:
                raise ValueError(f"batch[{key!r}] must have shape [B, {dim}]"
                                 + (f", got {batch[key].shape}" if key in batch else " (missing)"))
        shape = batch["observations"].shape
        if len(shape) >= 2 and shape[0] == 0:
            raise ValueError(f"batch['observations'] has batch size B = 0 (shape {shape}); update needs B >= 1 rows")
        grads, metrics = jax.grad(self.loss, has_aux=True)(self.params, batch)
        return self.replace(policy_state=self.policy_state.apply_gradients(grads)), metrics

    def act(self, observations, goals, rng=None):
        """A sample of pi(. | s, g) if ``rng`` (a PRNG key or an int seed) is given, else its mode; in [-1, 1]^A."""
        observations, goals = jnp.broadcast_arrays(jnp.asarray(observations), jnp.asarray(goals))
        mean, log_std = self.policy.apply(self.params, jnp.concatenate([observations, goals], -1))
        return jnp.tanh(mean) if rng is None else tanh_normal_sample(as_key(rng), mean, log_std)[0]
