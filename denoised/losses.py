"""Denoised MDP objectives (dissertation eq. 5.4, appendix D.2.1) and Dreamer's policy-learning losses (latent
SAC's are shared: :mod:`platonic_rl.common.losses`).

All functions are pure and take arrays; the agent composes them (:mod:`platonic_rl.agents.denoised_mdp`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from platonic_rl.denoised.model import gaussian_kl


def gaussian_nll(target: jax.Array, mean: jax.Array, event_dims: int) -> jax.Array:
    """-log N(target; mean, I) without the constant, summed over the last ``event_dims`` axes."""
    sq = 0.5 * jnp.square(target.astype(jnp.float32) - mean)
    return sq.sum(axis=tuple(range(-event_dims, 0))) if event_dims else sq


def model_loss(recon_nll: jax.Array, reward_nll: jax.Array, stats: dict, alpha: float = 1.0, beta: float = 1.0,
               free_nats: float = 3.0, kl_split: bool = False) -> tuple[jax.Array, dict]:
    """Eq. 5.4: L_recon + alpha (L_KL-x + beta L_KL-y + beta L_KL-z), averaged over (t, b).

    ``recon_nll``/``reward_nll`` are per-(b, t) negative log-likelihoods ``[B, T]``; ``stats`` maps each
    active factor to (prior mean, prior std, posterior mean, posterior std) ``[B, T, n]``.

    * Free nats (D.2.1): KL_x is clamped per (t, b) *before* averaging, max(KL_x, free_nats), so no gradient
      flows where it is already below ``free_nats``; KL_y and KL_z get no free nats (information may not
      hide in the factors that are discarded).
    * ``kl_split`` (D.2.1's alternative): KL_x = beta KL_x (the VAE term, with free nats) + (1 - beta) KL_x
      (the mutual-information regulariser, without).

    With y and z off and alpha = 1 this is Dreamer's loss.
    """
    kls = {f: gaussian_kl(q_mean, q_std, p_mean, p_std) for f, (p_mean, p_std, q_mean, q_std) in stats.items()}
    kl_x = kls["x"]
    if kl_split:
        kl_x_term = beta * jnp.maximum(kl_x, free_nats) + (1.0 - beta) * kl_x
    else:
        kl_x_term = jnp.maximum(kl_x, free_nats)
    kl = kl_x_term + beta * sum((kls[f] for f in ("y", "z") if f in kls), jnp.zeros_like(kl_x))
    total = jnp.mean(recon_nll + reward_nll + alpha * kl)
    metrics = dict(model_loss=total, recon_nll=recon_nll.mean(), reward_nll=reward_nll.mean(),
                   **{f"kl_{f}": v.mean() for f, v in kls.items()})
    return total, metrics


def lambda_returns(rewards: jax.Array, values: jax.Array, discount: float = 0.99, lam: float = 0.95) -> jax.Array:
    """TD(lambda) returns over an imagined rollout (time-major).

    ``rewards [H, N]`` are r(x_{t+1}) and ``values [H + 1, N]`` are v(x_t) for t = 0..H. Returns ``[H, N]``:
    G_t = r_t + gamma ((1 - lambda) v_{t+1} + lambda G_{t+1}), bootstrapped with G_H = v_H.
    """
    if values.shape[0] != rewards.shape[0] + 1:
        raise ValueError(f"values must have one more step than rewards, got {values.shape} and {rewards.shape}")

    def step(next_return, inputs):
        reward, next_value = inputs
        ret = reward + discount * ((1.0 - lam) * next_value + lam * next_return)
        return ret, ret

    _, returns = jax.lax.scan(step, values[-1], (rewards, values[1:]), reverse=True)
    return returns


def imagination_actor_loss(returns: jax.Array, discount: float = 0.99) -> jax.Array:
    """Dreamer's actor loss: -mean over steps of gamma^t G_t (gradients flow through the imagined dynamics)."""
    weights = discount ** jnp.arange(returns.shape[0], dtype=returns.dtype)
    return -jnp.mean(weights[:, None] * returns)


def value_loss(values: jax.Array, returns: jax.Array, discount: float = 0.99) -> jax.Array:
    """0.5 (v(x_t) - sg(G_t))^2, weighted by gamma^t like the actor's."""
    weights = discount ** jnp.arange(returns.shape[0], dtype=returns.dtype)
    return jnp.mean(weights[:, None] * 0.5 * jnp.square(values - jax.lax.stop_gradient(returns)))

