"""What a trained world model holds, read on DMC episodes: the data the DMC benchmark's probes fit
(:func:`latent_probe_data`: per step the posterior's x and y features, the true agent, distractor and task states,
the rewards, each reward head's prediction on the posterior and r_x predicted open loop by the x prior alone).
The read-outs themselves are in :mod:`platonic_rl.replearn.probes`.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from platonic_rl.denoised.model import features, rollout_x
from platonic_rl.training.world_model import PROBED_INFO, DMCOnlineConfig, run_episode

OPEN_LOOP_HORIZON = 15  # the imagination horizon of DreamerV1 and Denoised MDP


def latent_probe_data(agent, config: DMCOnlineConfig, episodes: int, seed: int, noise: float = 0.3,
                      open_loop_horizon: int = OPEN_LOOP_HORIZON) -> dict:
    """Roll ``episodes`` episodes with the agent (+ exploration noise for state coverage), filter each with
    the posterior, and return per-step x features, y features (if any), true agent states, distractor
    states, task states (the env's ``task_state``), the reward received on arriving at each step (0 at an
    episode's first, as the model is trained) and the one the unperturbed task paid (``task_reward``), each reward
    head's prediction on the posterior states (``reward_x``, ``reward_y`` if y; the model's reward is their sum),
    r_x predicted open loop (``reward_x_open_loop`` [steps, ``open_loop_horizon``]: column k - 1 from the posterior
    k steps earlier; :func:`open_loop_reward_x`) and the episode index of every step."""
    env = config.make_env()
    m = agent.config.model
    out = {k: [] for k in ("x", "y", *PROBED_INFO, "reward", "reward_x", "reward_y", "reward_x_open_loop", "episode")}
    for i in range(episodes):
        episode_key = jax.random.PRNGKey(seed + i)
        act_key, filter_key = jax.random.split(episode_key)  # the policy's and the filter's draws
        prior_key = jax.random.fold_in(episode_key, 1)  # the open-loop prior's, leaving the two above as they were
        ep = run_episode(env, agent, act_key, noise, seed=seed + i)
        states, _ = _posterior(agent, ep["observations"][None], ep["prev_actions"][None], filter_key)
        predicted = _reward_heads(agent, states)
        out["reward"].append(ep["rewards"])
        out["reward_x_open_loop"].append(open_loop_reward_x(agent, jax.tree.map(lambda s: s[0], states),
                                                            ep["prev_actions"], open_loop_horizon, prior_key))
        for factor in ("x", "y"):
            if factor in m.factors:
                out[factor].append(np.asarray(features(states, factor))[0])
                out[f"reward_{factor}"].append(np.asarray(predicted[factor])[0])
        for name in PROBED_INFO:
            out[name].append(ep[f"{name}s"])
        out["episode"].append(np.full(len(ep["rewards"]), i))
    return {k: np.concatenate(v) for k, v in out.items() if v}


def open_loop_reward_x(agent, states: dict, prev_actions, horizon: int, key) -> np.ndarray:
    """r_x at every step of one episode as the x prior alone predicts it from ``k`` = 1..``horizon`` steps before:
    from the posterior state at step s - k, :func:`~platonic_rl.denoised.model.rollout_x` with the actions the
    episode took, then the reward head r_x. ``states``: the episode's posterior states (``[L, ...]`` each), reached
    by ``prev_actions`` ``[L, A]``. Returns ``[L, horizon]``: column k - 1 at step s, NaN where s < k. Imagination
    trains the policy on such rollouts (from replayed states, with the policy's actions), so where r_x read on
    the posterior (``reward_x``) predicts the reward and this does not, the policy learns from a world the model
    cannot carry forward."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    steps = len(prev_actions)
    ahead = np.asarray(_open_loop(agent, {"hx": states["hx"], "x": states["x"]}, jnp.asarray(prev_actions), key,
                                  horizon))                                            # [horizon, L]: from step t
    out = np.full((steps, horizon), np.nan, np.float32)
    for k in range(1, min(horizon, steps - 1) + 1):
        out[k:, k - 1] = ahead[k - 1, :steps - k]                                      # to step t + k
    return out


@functools.partial(jax.jit, static_argnums=4)
def _open_loop(agent, start: dict, prev_actions, key, horizon: int):
    """[horizon, L]: row j, column t: r_x after j + 1 prior steps from the posterior at t with the actions
    ``prev_actions[t + 1 .. t + j + 1]`` (zeros past the episode's end, where no step is compared)."""
    steps = prev_actions.shape[0]
    padded = jnp.concatenate([prev_actions, jnp.zeros((horizon, prev_actions.shape[1]), prev_actions.dtype)])
    actions = jnp.stack([padded[1 + j: 1 + j + steps] for j in range(horizon)])       # [horizon, L, A]
    rolled = rollout_x(agent.config.model, agent.model_params, start, actions, key)
    return agent.model.apply(agent.model_params, rolled, method="reward")["x"][1:]


_posterior = jax.jit(lambda agent, observations, prev_actions, key: agent.posterior(observations, prev_actions, key))
_reward_heads = jax.jit(lambda agent, states: agent.model.apply(agent.model_params, states, method="reward"))
