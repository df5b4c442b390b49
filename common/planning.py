"""Model-predictive path integral control (MPPI; Williams et al. 2015/2017) as a pure, jit-able function.

    action, plan = mppi_step(key, plan, cost_fn, num_samples=10_000, noise_std=1.0, temperature=0.01)

One planning step: ``num_samples`` action sequences ``u_k = clip(plan + eps_k)``, eps_k ~ N(0, noise_std^2 I)
of shape ``[H, A]``, are scored by ``cost_fn(sequences [K, H, A]) -> [K]``; with the control-noise cost of
information-theoretic MPPI, S_k = cost(u_k) + temperature * sum_t plan_t . eps_{k,t} / noise_std^2, the plan
moves to the softmin-weighted average plan + sum_k w_k eps_k, w = softmax(-S / temperature). The first action
of the new plan is executed and the plan shifted by one step (receding horizon; the last action repeated).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def mppi_step(key: jax.Array, plan: jax.Array, cost_fn: Callable[[jax.Array], jax.Array], num_samples: int,
              noise_std: float = 1.0, temperature: float = 0.01, low: float = -1.0, high: float = 1.0
              ) -> tuple[jax.Array, jax.Array]:
    """``(action [A], next plan [H, A])`` from the current ``plan [H, A]``; see the module docstring."""
    if plan.ndim != 2:
        raise ValueError(f"plan must be [horizon, action_dim], got shape {plan.shape}")
    noise = noise_std * jax.random.normal(key, (num_samples, *plan.shape))
    sequences = jnp.clip(plan + noise, low, high)
    control_cost = temperature * jnp.sum(plan * noise, axis=(1, 2)) / noise_std ** 2
    scores = cost_fn(sequences) + control_cost
    weights = jax.nn.softmax(-(scores - scores.min()) / temperature)
    new_plan = jnp.clip(plan + jnp.einsum("k,kha->ha", weights, sequences - plan), low, high)
    shifted = jnp.concatenate([new_plan[1:], new_plan[-1:]], 0)
    return new_plan[0], shifted
