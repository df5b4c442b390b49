"""RL losses shared by several agents: soft actor-critic's (Haarnoja et al. 2018) entropy weight, critic
target and actor loss. Q-values of an ensemble are stacked on a leading axis ``[num_q, B]`` and reduced
pessimistically (min over the ensemble: clipped double Q); a single critic is ``q[None]``."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def entropy_weight_loss(log_entropy_weight: jax.Array, log_probs: jax.Array, target_entropy: float
                        ) -> jax.Array:
    """-log(alpha) (E[log pi] + H_target), minimised in log(alpha) (Haarnoja et al. 2018): alpha grows
    while the policy's entropy -E[log pi] is below the target and shrinks while it is above."""
    return -log_entropy_weight * (jnp.mean(jax.lax.stop_gradient(log_probs)) + target_entropy)


def sac_critic_target(rewards: jax.Array, next_q: jax.Array, next_log_probs: jax.Array, alpha,
                      discount: float = 0.99) -> jax.Array:
    """r + gamma (min_i Q_i'(x', a') - alpha log pi(a' | x')) with a' ~ pi(. | x') and *its* log-prob
    (the official Denoised MDP code used the current action's log-prob here; that is a bug).
    ``next_q: [num_q, B]``."""
    return rewards + discount * (jnp.min(next_q, axis=0) - alpha * next_log_probs)


def sac_actor_loss(q: jax.Array, log_probs: jax.Array, alpha) -> jax.Array:
    """E[alpha log pi(a | x) - min_i Q_i(x, a)], a ~ pi(. | x) reparametrised; ``q: [num_q, B]``."""
    return jnp.mean(alpha * log_probs - jnp.min(q, axis=0))
