"""Denoised MDP: KLs, free nats, the factored RSSM's structure, lambda-returns, SAC target, the agent."""
import dataclasses
import functools
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from platonic_rl.common.losses import sac_actor_loss, sac_critic_target
from platonic_rl.common.policies import DreamerTanhNormalPolicy, TanhNormalPolicy
from platonic_rl.denoised import losses
from platonic_rl.denoised.model import (WorldModelConfig, all_features, features, gaussian_kl, imagine_x, init_params, initial_state,
                            observe, rollout_x, FactoredRSSM)

SMALL = dict(obs_shape=(5,), action_dim=2, x_belief=8, x_state=3, y_belief=6, y_state=2, hidden=16, embed_dim=16,
             mlp_encoder_hidden=(16,), mlp_decoder_hidden=(16,))
sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402
from arbitrary import arbitrary_like  # noqa: E402

RECORDED = update_fixtures.world_model_config()  # SMALL's sizes, the clipped actor
"""The agent of the recorded "denoised_imagine" case (tests/fixtures/update_fixtures.py): with its batch shapes
(``sequences()``), its create and update compile to the same programs there and here, which the suite's
compilation cache (tests/conftest.py) then compiles once."""

# Compiled once: op by op, each primitive was compiled on its own. The config is static (hashable).
observe_jit = jax.jit(observe, static_argnums=0)

WITH_Z = DenoisedMDPConfig(model=WorldModelConfig(**SMALL, z_belief=4, z_state=2), actor_hidden=(16,),
                           critic_hidden=(16,), horizon=3, actor="dreamer")
"""A tiny agent with all three factors, for the tests whose checks hold for any parameters."""


def arbitrary_agent(config: DenoisedMDPConfig) -> DenoisedMDPAgent:
    """An agent of ``config`` whose parameters (and optimizer states) are arbitrary (tests/fixtures/arbitrary.py),
    observations unscaled: for checks of what the model and the actor compute whatever their parameters (shapes,
    dependencies, determinism). A real create of a new config compiles for seconds."""
    agent = arbitrary_like(jax.eval_shape(lambda: DenoisedMDPAgent.create(config, 0)))
    return agent.replace(obs_mean=jnp.zeros_like(agent.obs_mean), obs_std=jnp.ones_like(agent.obs_std))


def model_params(config: DenoisedMDPConfig):
    return arbitrary_agent(config).model_params


def sequences(b=3, t=4, d=5, a=2, seed=0):
    rng = np.random.default_rng(seed)
    return dict(observations=jnp.asarray(rng.normal(size=(b, t, d)), jnp.float32),
                prev_actions=jnp.asarray(rng.uniform(-1, 1, (b, t, a)), jnp.float32),
                rewards=jnp.asarray(rng.normal(size=(b, t)), jnp.float32))


def test_gaussian_kl_matches_closed_form():
    # KL(N(1, 2^2) || N(0, 1)) = 0.5 (4 + 1 - 1 - ln 4) per dimension; summed over 2 dimensions.
    kl = gaussian_kl(jnp.ones(2), 2 * jnp.ones(2), jnp.zeros(2), jnp.ones(2))
    np.testing.assert_allclose(kl, 2 * 0.5 * (4 - math.log(4)), rtol=1e-6)
    assert float(gaussian_kl(jnp.array([0.3]), jnp.array([0.7]), jnp.array([0.3]), jnp.array([0.7]))) == 0.0
    # Against a Monte Carlo estimate of E_q[log q - log p].
    rng = np.random.default_rng(0)
    mq, sq, mp, sp = 0.5, 0.4, -0.2, 1.3
    s = rng.normal(mq, sq, 400_000)
    logq = -0.5 * ((s - mq) / sq) ** 2 - math.log(sq)
    logp = -0.5 * ((s - mp) / sp) ** 2 - math.log(sp)
    np.testing.assert_allclose(gaussian_kl(jnp.array([mq]), jnp.array([sq]), jnp.array([mp]), jnp.array([sp])),
                               np.mean(logq - logp), atol=5e-3)


def _stats_with_kl(kl_values):
    """Per-(b, t) stats whose KL equals ``kl_values`` (1-D Gaussians with unit std, mean offset sqrt(2 KL))."""
    kl_values = jnp.asarray(kl_values, jnp.float32)[..., None]
    ones = jnp.ones_like(kl_values)
    return (0 * ones, ones, jnp.sqrt(2 * kl_values), ones)


def test_free_nats_clamp_each_step_before_averaging():
    stats = {"x": _stats_with_kl([[1.0, 5.0]]), "y": _stats_with_kl([[1.0, 5.0]])}
    zero = jnp.zeros((1, 2))
    total, metrics = losses.model_loss(zero, zero, stats, alpha=1.0, beta=0.5, free_nats=3.0)
    # KL_x: mean(max(1, 3), max(5, 3)) = 4 (not max(mean, 3) = 3); KL_y unclamped: 0.5 * mean(1, 5) = 1.5.
    np.testing.assert_allclose(total, 4.0 + 1.5, rtol=1e-5)
    np.testing.assert_allclose(metrics["kl_x"], 3.0, rtol=1e-5)
    # No gradient through a step whose KL_x is under the free nats; the y term always has one.
    grad = jax.grad(lambda m: losses.model_loss(zero, zero, {"x": (stats["x"][0], stats["x"][1], m, stats["x"][3]),
                                                             "y": stats["y"]}, free_nats=3.0)[0])(stats["x"][2])
    assert float(grad[0, 0, 0]) == 0.0 and float(grad[0, 1, 0]) > 0
    # alpha scales every KL; the KL-x split keeps free nats on beta KL_x only.
    total2, _ = losses.model_loss(zero, zero, stats, alpha=2.0, beta=0.5, free_nats=3.0)
    np.testing.assert_allclose(total2, 2 * 5.5, rtol=1e-5)
    split, _ = losses.model_loss(zero, zero, {"x": stats["x"]}, beta=0.5, free_nats=3.0, kl_split=True)
    np.testing.assert_allclose(split, np.mean([0.5 * 3 + 0.5 * 1, 0.5 * 5 + 0.5 * 5]), rtol=1e-5)


def test_scanned_sequence_shapes_for_every_factor():
    config, params = WITH_Z.model, model_params(WITH_Z)
    data = sequences()
    states, stats = observe_jit(config, params, data["observations"], data["prev_actions"], jax.random.PRNGKey(1))
    assert states["hx"].shape == (3, 4, 8) and states["x"].shape == (3, 4, 3)
    assert states["hy"].shape == (3, 4, 6) and states["y"].shape == (3, 4, 2) and states["z"].shape == (3, 4, 2)
    assert set(stats) == {"x", "y", "z"} and all(s.shape == (3, 4, 2) for s in stats["z"])
    assert all_features(config, states).shape == (3, 4, 8 + 3 + 6 + 2 + 4 + 2)
    assert (np.asarray(stats["x"][1]) >= 0.1).all()  # std = softplus + 0.1
    with pytest.raises(ValueError, match="observations must be"):
        observe(config, params, data["observations"][:, :, :4], data["prev_actions"], jax.random.PRNGKey(1))


def test_y_prior_never_depends_on_actions_but_x_and_z_do():
    """The priors' one-step transition: d prior_y / d a = 0 for any previous latents; x and z do use a.
    (Over a filtered sequence y_{t-1} is a posterior sample, which may see the action, as in section 5.3.)"""
    config, params = WITH_Z.model, model_params(WITH_Z)
    model = FactoredRSSM(config)
    rng = np.random.default_rng(0)
    previous = {k: jnp.asarray(rng.normal(size=v.shape), jnp.float32) for k, v in initial_state(config, (3,)).items()}
    embed = jnp.asarray(rng.normal(size=(3, 16)), jnp.float32)
    actions = jnp.asarray(rng.uniform(-1, 1, (3, 2)), jnp.float32)

    def prior_mean(actions, factor):
        _, stats = model.apply(params, previous, actions, embed, jax.random.PRNGKey(1), method="observe_step")
        return stats[factor][0].sum() + stats[factor][1].sum()

    for factor, dependent in (("y", False), ("x", True), ("z", True)):
        grad = jax.jit(jax.grad(prior_mean), static_argnums=1)(actions, factor)
        assert (float(jnp.abs(grad).max()) > 1e-6) == dependent, factor


def test_dreamer_is_the_x_only_model_with_dreamers_loss():
    model = WorldModelConfig(**SMALL)
    # The recorded "dreamer_actor_dreamer" case's config (tests/fixtures/update_fixtures.py), whose create the
    # suite's compilation cache then compiles once.
    config = DenoisedMDPConfig.dreamer(model, free_nats=3.0, **dict(update_fixtures.HEADS, actor="dreamer"))
    assert config == update_fixtures.world_model_config(dreamer=True, actor="dreamer")
    assert config.model.factors == ("x",) and config.alpha == 1.0
    # every field but the y and z sizes is the given model's (conv_impl was once dropped here)
    assert config.model == dataclasses.replace(model, y_belief=0, y_state=0, z_belief=0, z_state=0)
    assert DenoisedMDPConfig.dreamer(dataclasses.replace(model, conv_impl="xla")).model.conv_impl == "xla"
    agent = DenoisedMDPAgent.create(config, 0)
    names = set(agent.model_params["params"])
    assert not any("y" in n.split("_")[-1] or n.endswith("_z") for n in names)
    assert {n for n in names if n.startswith(("cells", "priors", "posteriors", "rewards"))} == {
        "cells_x", "inputs_x", "priors_x", "posteriors_x", "rewards_x"} - {"inputs_x"}
    data = sequences()

    @jax.jit
    def loss_and_expected(agent, data):
        loss, (states, metrics) = agent.model_loss_fn(agent.model_params, data, jax.random.PRNGKey(3))
        # Recompute Dreamer's loss by hand from the same posterior samples.
        _, stats = observe(config.model, agent.model_params, data["observations"], data["prev_actions"],
                           jax.random.PRNGKey(3))
        m = FactoredRSSM(config.model)
        recon = m.apply(agent.model_params, all_features(config.model, states), method="decode")
        reward = m.apply(agent.model_params, states, method="reward")["x"]
        kl = gaussian_kl(stats["x"][2], stats["x"][3], stats["x"][0], stats["x"][1])
        expected = jnp.mean(0.5 * jnp.sum((data["observations"] - recon) ** 2, -1)
                            + 0.5 * (data["rewards"] - reward) ** 2 + jnp.maximum(kl, 3.0))
        return loss, expected

    loss, expected = loss_and_expected(agent, data)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_observation_statistics_standardise_what_the_model_sees_and_reconstructs():
    agent = DenoisedMDPAgent.create(RECORDED, 0)
    np.testing.assert_array_equal(agent.obs_mean, 0.0)  # identity until statistics are set
    np.testing.assert_array_equal(agent.obs_std, 1.0)
    data = sequences()
    scale = jnp.asarray([0.05, 1.0, 5.0, 20.0, 1.0])  # positions and velocities of very different spreads
    raw = dict(data, observations=data["observations"] * scale + 3.0)
    raw["observations"] = raw["observations"].at[..., 4].set(7.0)  # a constant dimension
    fitted = agent.with_observation_statistics(raw["observations"])
    flat = np.asarray(raw["observations"]).reshape(-1, 5)
    np.testing.assert_allclose(fitted.obs_mean, flat.mean(0), rtol=1e-5)
    np.testing.assert_allclose(fitted.obs_std[:4], flat.std(0)[:4], rtol=1e-4)
    assert float(fitted.obs_std[4]) == pytest.approx(1e-3)  # floored: centred, not divided by ~0
    # The fitted agent on raw observations computes exactly what the plain agent computes on standardised ones.
    standardised = dict(raw, observations=(raw["observations"] - fitted.obs_mean) / fitted.obs_std)
    key = jax.random.PRNGKey(3)
    loss = jax.jit(lambda a, batch: a.model_loss_fn(a.model_params, batch, key)[0])  # one compile for both
    np.testing.assert_allclose(loss(fitted, raw), loss(agent, standardised), rtol=1e-6)
    latent = agent.initial_latent(3)
    act = jax.jit(DenoisedMDPAgent.act)
    a_fitted, _ = act(fitted, latent, raw["observations"][:, 0], raw["prev_actions"][:, 0])
    a_plain, _ = act(agent, latent, standardised["observations"][:, 0], raw["prev_actions"][:, 0])
    np.testing.assert_allclose(a_fitted, a_plain, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"observations must be \[..., 5\]"):
        agent.with_observation_statistics(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="non-finite"):
        agent.with_observation_statistics(np.full((4, 5), np.nan))


def test_lambda_returns_match_a_python_reference():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(5, 3)), rng.normal(size=(6, 3))
    expected, scale = np.zeros((5, 3)), np.zeros((5, 3))  # scale: the same recursion on |rewards|, |values|
    nxt, nxt_abs = values[-1], np.abs(values[-1])
    for t in reversed(range(5)):
        nxt = rewards[t] + 0.9 * ((1 - 0.8) * values[t + 1] + 0.8 * nxt)
        nxt_abs = np.abs(rewards[t]) + 0.9 * ((1 - 0.8) * np.abs(values[t + 1]) + 0.8 * nxt_abs)
        expected[t], scale[t] = nxt, nxt_abs
    got = np.asarray(losses.lambda_returns(jnp.asarray(rewards), jnp.asarray(values), 0.9, 0.8), np.float64)
    # Returns can be near zero: bound the float32 error by the terms, not the result. Each of the <= 6 steps adds
    # <= ~7 roundings (inputs, constants, products, sums), each <= eps times a part of scale: <= 42 eps scale.
    error, bound = np.abs(got - expected), 48 * 2.0 ** -24 * scale
    assert np.all(error <= bound), (error / bound).max()
    # lambda = 1: discounted Monte Carlo return bootstrapped at the end.
    mc = losses.lambda_returns(jnp.ones((3, 1)), jnp.zeros((4, 1)), 0.5, 1.0)
    np.testing.assert_allclose(mc[:, 0], [1.75, 1.5, 1.0])
    with pytest.raises(ValueError, match="one more step"):
        losses.lambda_returns(jnp.ones((3, 1)), jnp.ones((3, 1)))


def test_sac_target_uses_the_next_actions_log_prob():
    # Twin target critics stacked [2, B]: the smaller one, 2, is bootstrapped.
    target = sac_critic_target(jnp.array([1.0]), jnp.array([[2.0], [3.0]]), jnp.array([-4.0]), alpha=0.5,
                               discount=0.9)
    np.testing.assert_allclose(target, 1.0 + 0.9 * (2.0 + 0.5 * 4.0))
    # The actor's loss takes the pessimistic critic too: mean(0.5 * [-1, 1] - min([[1, 5], [3, 2]])) = -1.5.
    loss = sac_actor_loss(jnp.array([[1.0, 5.0], [3.0, 2.0]]), jnp.array([-1.0, 1.0]), 0.5)
    assert float(loss) == pytest.approx(-1.5)


def test_imagination_rolls_the_x_prior_only():
    config, params = RECORDED.model, model_params(RECORDED)
    start = {k: v for k, v in initial_state(config, (7,)).items() if k in ("hx", "x")}
    policy = lambda feat, key: jnp.tanh(feat[..., :2])  # noqa: E731
    states, actions = imagine_x(config, params, start, policy, 4, jax.random.PRNGKey(1))
    assert states["x"].shape == (5, 7, 3) and actions.shape == (4, 7, 2) and set(states) == {"hx", "x"}


def test_open_loop_rollouts_take_the_given_actions_in_order():
    """State j + 1 is the prior's step on action j: changing the action of step 2 leaves states 0-2 as they were and
    moves state 3 on; the same actions and key give the same rollout."""
    config, params = RECORDED.model, model_params(RECORDED)
    start = {k: v + 0.1 for k, v in initial_state(config, (7,)).items() if k in ("hx", "x")}
    actions = jnp.tile(jnp.linspace(-0.9, 0.9, 4)[:, None, None], (1, 7, 2))  # [4 steps, 7 starts, 2]
    key = jax.random.PRNGKey(3)
    states = rollout_x(config, params, start, actions, key)
    assert states["x"].shape == (5, 7, 3) and states["hx"].shape == (5, 7, 8) and set(states) == {"hx", "x"}
    np.testing.assert_array_equal(states["x"][0], start["x"])
    changed = rollout_x(config, params, start, actions.at[2].set(-actions[2]), key)
    for name in ("hx", "x"):
        np.testing.assert_array_equal(changed[name][:3], states[name][:3])
        assert np.abs(np.asarray(changed[name][3] - states[name][3])).max() > 1e-4
    np.testing.assert_array_equal(rollout_x(config, params, start, actions, key)["x"], states["x"])
    with pytest.raises(ValueError, match="actions must be"):
        rollout_x(config, params, start, actions[:, :5], key)


UPDATES = 150
"""Updates of the learning check on a fixed batch: at the recorded agent's learning rates (the model's 6e-4) the
reconstruction error falls to 0.79 of its first value after 40, 0.58 after 120, 0.49 after 160."""


# SAC's update runs fast in tests/test_update_fixtures.py (denoised_sac: its recorded numbers); its learning check is in
# the slow suite.
@pytest.mark.parametrize("policy", ["imagine", pytest.param("sac", marks=pytest.mark.slow)])
def test_agent_update_act_and_learning(policy):
    agent = DenoisedMDPAgent.create(dataclasses.replace(RECORDED, policy=policy), 0)
    data = sequences()
    update = jax.jit(DenoisedMDPAgent.update)
    first = None
    for _ in range(UPDATES):
        agent, metrics = update(agent, data)
        first = metrics if first is None else first
    assert float(metrics["recon_nll"]) < 0.7 * float(first["recon_nll"])  # the model fits a fixed batch
    assert all(np.isfinite(float(v)) for v in metrics.values())
    latent = agent.initial_latent(2)
    actions, latent = jax.jit(DenoisedMDPAgent.act)(agent, latent, data["observations"][:2, 0],
                                                    data["prev_actions"][:2, 0], jax.random.PRNGKey(0))
    assert actions.shape == (2, 2) and np.abs(np.asarray(actions)).max() <= 1 and latent["y"].shape == (2, 2)
    with pytest.raises(ValueError, match="prev_actions"):
        agent.update({**data, "prev_actions": data["prev_actions"][..., :1]})
    with pytest.raises(ValueError, match="observations must be"):
        agent.act(latent, np.zeros((2, 4)), np.zeros((2, 2)))


def test_bad_configs_are_rejected():
    with pytest.raises(ValueError, match="y_belief and y_state"):
        WorldModelConfig(y_belief=0, y_state=4)
    with pytest.raises(ValueError, match="x factor"):
        WorldModelConfig(x_belief=0, x_state=0)
    with pytest.raises(ValueError, match="obs_shape"):
        WorldModelConfig(obs_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="beta"):
        DenoisedMDPConfig(beta=0.0)
    with pytest.raises(ValueError, match="policy"):
        DenoisedMDPConfig(policy="ppo")
    with pytest.raises(ValueError, match="actor must be"):
        DenoisedMDPConfig(actor="gaussian")


def test_dreamer_actor_bounds_its_mean_and_starts_wide():
    """DreamerV1's parametrisation by hand: zero outputs give mean 0 and sigma softplus(softplus^-1(5)) + 1e-4;
    a huge output gives mean 5 tanh(m / 5) ~ 5, not m; sigma keeps a gradient where a clipped log sigma has none."""
    actor = DreamerTanhNormalPolicy((4,), action_dim=2)
    params = actor.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    zero = jax.tree.map(jnp.zeros_like, params)
    mean, log_std = actor.apply(zero, jnp.ones((1, 3)))
    np.testing.assert_allclose(mean, 0.0, atol=1e-7)
    np.testing.assert_allclose(np.exp(log_std), 5.0 + 1e-4, rtol=1e-6)
    big = jax.tree.map(lambda p: p, zero)  # a copy
    big["params"]["Dense_1"]["bias"] = jnp.array([100.0, -1.0, -100.0, 0.0])  # raw mean (100, -1), raw std (-100, 0)
    mean, log_std = actor.apply(big, jnp.ones((1, 3)))
    np.testing.assert_allclose(mean[0], [5 * np.tanh(20.0), 5 * np.tanh(-0.2)], rtol=1e-6)
    np.testing.assert_allclose(np.exp(log_std[0, 0]), np.log1p(np.exp(-100 + np.log(np.expm1(5.0)))) + 1e-4, rtol=1e-5)
    grad = jax.grad(lambda b: actor.apply({"params": {**big["params"], "Dense_1": {**big["params"]["Dense_1"],
                                                                                  "bias": b}}},
                                          jnp.ones((1, 3)))[1][0, 1])(big["params"]["Dense_1"]["bias"])
    c = np.log(np.expm1(5.0))
    np.testing.assert_allclose(grad[3], (1 / (1 + np.exp(-c))) / (5.0 + 1e-4), rtol=1e-5)  # d log sigma / d s at s = 0
    low_bias = jnp.array([0.0, 0.0, -9.0, -9.0])
    grad = jax.grad(lambda b: actor.apply({"params": {**zero["params"], "Dense_1": {**zero["params"]["Dense_1"],
                                                                                   "bias": b}}},
                                          jnp.ones((1, 3)))[1][0, 0])(low_bias)
    softplus = np.log1p(np.exp(c - 9))
    np.testing.assert_allclose(grad[2], (1 / (1 + np.exp(9 - c))) / (softplus + 1e-4), rtol=1e-4)  # ~0.99, not 0
    clipped = TanhNormalPolicy((4,), action_dim=2)
    low = {"params": {**zero["params"], "Dense_1": {"kernel": zero["params"]["Dense_1"]["kernel"], "bias": low_bias}}}
    grad = jax.grad(lambda b: clipped.apply({"params": {**low["params"], "Dense_1": {**low["params"]["Dense_1"],
                                                                                    "bias": b}}},
                                            jnp.ones((1, 3)))[1].sum())(low["params"]["Dense_1"]["bias"])
    np.testing.assert_array_equal(grad[2:], 0.0)  # below the clip, the clipped log sigma has no gradient


def test_deterministic_act_filters_with_the_posterior_mean():
    """act without rng is deterministic and uses the posterior means (not one fixed noise draw every step); z's
    posterior then reads x's and y's means."""
    config = WITH_Z
    agent = arbitrary_agent(config)
    data = sequences(b=2, t=2)
    obs, prev = data["observations"][:, 0], data["prev_actions"][:, 0]
    latent = agent.initial_latent(2)
    act = jax.jit(DenoisedMDPAgent.act)
    a1, l1 = act(agent, latent, obs, prev)
    a2, l2 = act(agent, latent, obs, prev)
    np.testing.assert_array_equal(a1, a2)

    @jax.jit
    def observe_step(agent, latent, obs, prev):  # with a key and without (the posterior means)
        embed = agent.model.apply(agent.model_params, obs, method="encode")
        step = functools.partial(agent.model.apply, agent.model_params, latent, prev, embed, method="observe_step")
        return step(jax.random.PRNGKey(3))[1], step(None)[1]

    stats, mean_stats = observe_step(agent, latent, obs, prev)
    np.testing.assert_allclose(l1["x"], stats["x"][2], atol=1e-6)  # the posterior mean of x
    np.testing.assert_allclose(l1["y"], stats["y"][2], atol=1e-6)
    assert not np.allclose(l1["z"], stats["z"][2], atol=1e-3)  # z's posterior there read sampled x and y
    np.testing.assert_allclose(l1["z"], mean_stats["z"][2], atol=1e-6)
    mean, _ = agent.actor_module(config).apply(agent.actor_params, features(l1, "x"))
    np.testing.assert_allclose(a1, np.tanh(mean), atol=1e-6)


def test_pixel_encoder_and_decoder_shapes():
    """The D.2.1 64x64 conv pair (checked by shape inference only, to stay fast)."""
    config = WorldModelConfig(**{**SMALL, "obs_shape": (64, 64, 3), "conv_width": 4, "embed_dim": 32})
    params = jax.eval_shape(lambda key: init_params(config, key), jax.random.PRNGKey(0))
    conv = params["params"]["encoder"]
    assert [conv[f"Conv_{i}"]["kernel"].shape for i in range(4)] == [(4, 4, 3, 4), (4, 4, 4, 8), (4, 4, 8, 16),
                                                                      (4, 4, 16, 32)]  # k, 2k, 4k, 8k
    assert conv["Dense_0"]["kernel"].shape == (2 * 2 * 32, 32)  # 64 -> 31 -> 14 -> 6 -> 2
    model = FactoredRSSM(config)
    frames = jax.ShapeDtypeStruct((2, 3, 64, 64, 3), jnp.uint8)
    embed = jax.eval_shape(lambda p, f: model.apply(p, f, method="encode"), params, frames)
    feats = jax.ShapeDtypeStruct((2, 3, 8 + 3 + 6 + 2), jnp.float32)
    recon = jax.eval_shape(lambda p, f: model.apply(p, f, method="decode"), params, feats)
    assert embed.shape == (2, 3, 32) and recon.shape == (2, 3, 64, 64, 3)  # 1 -> 5 -> 13 -> 30 -> 64


def test_pixel_decoder_rectifies_its_fully_connected_layer():
    """Table D.3: FC + ReLU, then the transposed convolutions. With the FC's kernel zeroed and its bias negative, the
    ReLU gives zeros whatever the bias, so the image is the same for bias -1 and -3 (without it, they would differ)."""
    from platonic_rl.denoised.model import ConvDecoder
    decoder = ConvDecoder(width=2, embed_dim=8)
    features = jnp.ones((1, 5))
    params = decoder.init(jax.random.PRNGKey(0), features)

    def with_fc_bias(value):
        dense = {"kernel": jnp.zeros((5, 8)), "bias": jnp.full((8,), value)}
        return decoder.apply({"params": {**params["params"], "Dense_0": dense}}, features)
    np.testing.assert_array_equal(with_fc_bias(-1.0), with_fc_bias(-3.0))
    assert not np.allclose(with_fc_bias(1.0), with_fc_bias(3.0))  # the FC does reach the image
