"""Tanh-Normal policies shared by the continuous-control agents: the networks, reparametrised samples and
log-densities of given actions."""
from __future__ import annotations

import functools
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.scipy.special
import jax.numpy as jnp
import numpy as np

from platonic_rl.common.networks import AtariConvBackbone

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def _two_halves(x: jax.Array, hidden: Sequence[int], action_dim: int, activation, dtype) -> tuple[jax.Array, jax.Array]:
    """The raw (location, scale) outputs of an MLP head, float32, each [..., action_dim]; called inside a compact
    ``__call__``, so its layers belong to (and are named in) the calling module."""
    for width in hidden:
        x = activation(nn.Dense(width, dtype=dtype)(x))
    out = nn.Dense(2 * action_dim, dtype=dtype)(x).astype(jnp.float32)
    return tuple(jnp.split(out, 2, axis=-1))


class TanhNormalPolicy(nn.Module):
    """pi(a | x) = tanh(N(mu(x), diag sigma(x)^2)): an MLP outputs mu and log sigma (clipped to [-5, 2])."""

    hidden: Sequence[int]
    action_dim: int
    dtype: Any = None  # computation dtype of the MLP (None: float32); mean and log sigma are float32

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        mean, log_std = _two_halves(x, self.hidden, self.action_dim, nn.relu, self.dtype)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


class DreamerTanhNormalPolicy(nn.Module):
    """DreamerV1's actor (Hafner et al., 2020), which the official Denoised MDP code keeps: an ELU MLP outputs m and
    s; the pre-tanh Normal has mean ``mean_scale * tanh(m / mean_scale)`` and standard deviation
    ``softplus(s + softplus^-1(init_std)) + min_std`` (``init_std`` where s = 0). Returns (mean, log sigma) as
    :class:`TanhNormalPolicy` does, so :func:`tanh_normal_sample` draws from it.

    Unlike the clipped log sigma, the bounded mean keeps tanh from saturating without limit, the wide start (sigma
    5: imagined actions near +-1) explores, and sigma keeps a gradient everywhere."""

    hidden: Sequence[int]
    action_dim: int
    mean_scale: float = 5.0
    init_std: float = 5.0
    min_std: float = 1e-4
    dtype: Any = None  # computation dtype of the MLP (None: float32); mean and log sigma are float32

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        raw_mean, raw_std = _two_halves(x, self.hidden, self.action_dim, nn.elu, self.dtype)
        mean = self.mean_scale * jnp.tanh(raw_mean / self.mean_scale)
        std = jax.nn.softplus(raw_std + float(np.log(np.expm1(self.init_std)))) + self.min_std
        return mean, jnp.log(std)


class GoalConditionedPolicy(nn.Module):
    """pi(a | s, g): a :class:`TanhNormalPolicy` on [s, g]; for images (``image=True``) on the concatenated
    features of one :class:`~platonic_rl.common.networks.AtariConvBackbone` applied to s and to g (C.3.3)."""

    hidden: Sequence[int]
    action_dim: int
    image: bool = False
    dtype: Any = None  # computation dtype (None: float32)

    @nn.compact
    def __call__(self, observations: jax.Array, goals: jax.Array) -> tuple[jax.Array, jax.Array]:
        if self.image:
            backbone = AtariConvBackbone(dtype=self.dtype)
            observations, goals = backbone(observations), backbone(goals)
        return TanhNormalPolicy(self.hidden, self.action_dim, dtype=self.dtype)(jnp.concatenate([observations, goals], -1))


def tanh_normal_sample(key: jax.Array, mean: jax.Array, log_std: jax.Array
                       ) -> tuple[jax.Array, jax.Array]:
    """Reparametrised sample a = tanh(mu + sigma eps) and its log-density

        log pi(a) = sum_j [log N(u_j; mu_j, sigma_j) - log(1 - tanh(u_j)^2)],

    with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) (stable for large |u|).
    """
    noise = jax.random.normal(key, mean.shape, mean.dtype)
    u = mean + jnp.exp(log_std) * noise
    log_normal = -0.5 * jnp.square(noise) - log_std - 0.5 * jnp.log(2 * jnp.pi)
    log_jacobian = 2 * (jnp.log(2.0) - u - jax.nn.softplus(-2 * u))
    return jnp.tanh(u), jnp.sum(log_normal - log_jacobian, axis=-1)


def tanh_normal_log_prob(mean: jax.Array, log_std: jax.Array, actions: jax.Array, threshold: float = 0.999
                         ) -> jax.Array:
    """log pi(a) of given actions in [-1, 1] under tanh(N(mu, sigma)), summed over the action dimensions.

    Inside (-threshold, threshold) this is the density of the squashed Normal. An entry at or beyond
    +-threshold (saturated actions: clipped controllers put many dataset actions at exactly +-1) is scored by
    the average density over [threshold, 1], i.e. log P(u >= atanh(threshold)) - log(1 - threshold) for the
    pre-tanh u ~ N(mu, sigma) (and the mirror image at -1), as Acme's TanhTransformedDistribution does (the
    official QRL and Contrastive RL code use it). The point density near +-1 would grow without bound as sigma
    shrinks, so behaviour cloning on saturated actions would drive the policy to a saturated, deterministic
    tanh whose gradients vanish; the tail mass is at most -log(1 - threshold) and is reached by any mean well
    past the threshold.
    """
    std = jnp.exp(log_std)
    a = jnp.clip(actions, -threshold, threshold)
    u = jnp.arctanh(a)
    interior = -0.5 * jnp.square((u - mean) / std) - log_std - 0.5 * jnp.log(2 * jnp.pi) - jnp.log1p(-jnp.square(a))
    edge = float(np.arctanh(threshold))
    log_width = float(np.log1p(-threshold))
    left = jax.scipy.special.log_ndtr((-edge - mean) / std) - log_width   # log P(u <= -edge) - log(1 - threshold)
    right = jax.scipy.special.log_ndtr((mean - edge) / std) - log_width   # log P(u >= edge) - log(1 - threshold)
    per_dim = jnp.where(actions <= -threshold, left, jnp.where(actions >= threshold, right, interior))
    return jnp.sum(per_dim, axis=-1)


def start_episodes(policy) -> None:
    """Tell a host-side policy that new episodes begin: a policy with state across calls (e.g.
    ``agents.contract.HostPolicy``, whose ``reset`` returns it to its initial state) is reset; a plain callable is
    left alone. The host evaluations call it before each batch of new episodes."""
    if callable(getattr(policy, "reset", None)):
        policy.reset()


@functools.partial(jax.jit, static_argnames=("noise",))
def explore(agent, observations, goals, key, noise: float):
    """The agent's sampled action plus N(0, noise^2), clipped to [-1, 1] (every online loop's exploration)."""
    policy_key, noise_key = jax.random.split(key)
    actions, _ = agent.step(None, observations, goals, None, policy_key)
    return jnp.clip(actions + noise * jax.random.normal(noise_key, actions.shape), -1.0, 1.0)
