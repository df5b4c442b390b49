"""Continuous-action QRL: tanh-Normal log-density, actor and entropy losses, the jitted update."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from platonic_rl.agents.qrl_continuous import IMAGE_DEFAULTS, QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.common.losses import entropy_weight_loss
from platonic_rl.common.policies import tanh_normal_sample
from platonic_rl.common.train_state import TrainState
from platonic_rl.qrl import losses

TINY = QRLContinuousConfig(obs_dim=5, action_dim=2, encoder_hidden=(32,), latent_dim=16, projector_hidden=(32,),
                           iqe_components=4, iqe_dim_per_component=8, dynamics_hidden=(32,), actor_hidden=(32,))
# Compiled once per shapes (shared by the tests): op by op, each primitive was compiled on its own.
act = jax.jit(QRLContinuousAgent.act)


def batch(n=32, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 5)).astype(np.float32)
    return dict(observations=obs, actions=rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                next_observations=obs + 0.1, rewards=-np.ones(n, np.float32),
                goals=rng.normal(size=(n, 5)).astype(np.float32))


def _tanh_normal_log_density_numpy(mean, log_std, actions, eps=1e-6):
    """sum_j log pi(a_j) per row, pi = tanh(N(mu, sigma)), by the change of variables in float64 (actions
    clipped to [-1 + eps, 1 - eps] as the library does)."""
    a = np.clip(np.asarray(actions, np.float64), -1 + eps, 1 - eps)
    u, mean, std = np.arctanh(a), np.asarray(mean, np.float64), np.exp(np.asarray(log_std, np.float64))
    return np.sum(stats.norm.logpdf(u, mean, std) - np.log(1 - a ** 2), -1)


def _tanh_normal_nll_numpy(mean, log_std, actions):
    return -np.mean(_tanh_normal_log_density_numpy(mean, log_std, actions))


def test_tanh_normal_log_density_matches_change_of_variables():
    mean, log_std = jnp.array([[0.3, -1.0]]), jnp.array([[-0.5, 0.2]])
    a, log_p = jax.jit(tanh_normal_sample)(jax.random.PRNGKey(0), mean, log_std)
    ref = _tanh_normal_log_density_numpy(mean, log_std, a)[0]
    assert float(log_p[0]) == pytest.approx(ref, rel=1e-4)
    assert np.all(np.abs(np.asarray(a)) < 1)


def test_actor_loss_takes_the_pessimistic_critic():
    distances = jnp.array([[1.0, 5.0], [3.0, 2.0]])  # [critics, batch]
    log_probs = jnp.array([-1.0, 1.0])
    # max over critics = [3, 5]; + 0.5 * log pi = [-0.5, 0.5] -> mean 4.0
    assert float(losses.actor_loss(distances, log_probs, jnp.float32(0.5))) == pytest.approx(4.0)


def test_entropy_weight_moves_towards_the_target():
    grad = jax.grad(entropy_weight_loss)
    # Entropy -E[log pi] = -1 below the target 2: alpha must grow (negative gradient on log alpha).
    assert float(grad(jnp.float32(0.0), jnp.array([1.0]), 2.0)) < 0
    assert float(grad(jnp.float32(0.0), jnp.array([-5.0]), 2.0)) > 0


def test_update_is_jittable_and_trains_two_independent_critics():
    agent = QRLContinuousAgent.create(TINY, 0)
    first_layer = [leaf for leaf in jax.tree.leaves(agent.critic_params) if leaf.ndim == 3][0]  # a kernel
    assert first_layer.shape[0] == 2 and not np.allclose(first_layer[0], first_layer[1])
    update = jax.jit(QRLContinuousAgent.update)
    b = batch()
    new, metrics = update(agent, b)
    assert all(np.isfinite(v).all() for v in metrics.values())
    assert {"critic0/push_loss", "critic1/push_loss", "actor_loss", "entropy_weight"} <= set(metrics)
    changed = lambda x, y: not np.allclose(x, y)  # noqa: E731
    assert any(changed(x, y) for x, y in zip(jax.tree.leaves(new.actor_params), jax.tree.leaves(agent.actor_params)))
    assert changed(new.log_entropy_weight, agent.log_entropy_weight)
    for _ in range(3):
        new, metrics = update(new, b)
    a = act(new, b["observations"], b["goals"], jax.random.PRNGKey(0))
    assert a.shape == (32, 2) and np.all(np.abs(a) <= 1)
    np.testing.assert_array_equal(act(new, b["observations"], b["goals"]), act(new, b["observations"], b["goals"]))


class KnownCriticAgent(QRLContinuousAgent):
    """Critics replaced by the exact cost-to-go of s' = s + a: d(T(s, a), g) = ||s + a - g||."""

    def goal_distances_after(self, critic_params, observations, actions, goals):
        return jnp.stack([jnp.linalg.norm(observations + actions - goals, axis=-1)] * 2)


def test_actor_learns_to_move_towards_the_goal_under_a_known_critic():
    """Only the actor is trained, against known critics: the learned action points at the goal."""
    config = dataclasses.replace(TINY, obs_dim=2, action_dim=2, entropy_init=1e-3)
    agent = KnownCriticAgent.create(config, 0)
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    goals = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    b = dict(observations=obs, goals=goals, actions=np.zeros((256, 2), np.float32))
    grad = jax.grad(lambda p, key: agent.actor_loss_fn(p, None, b, key)[0])
    step = jax.jit(lambda actor, i: actor.apply_gradients(grad(actor.params, jax.random.PRNGKey(i))))
    actor = TrainState.create(agent.actor_params, optax.adam(3e-3))
    for i in range(300):
        actor = step(actor, i)
    actions = np.asarray(jax.jit(KnownCriticAgent.act)(agent.replace(actor_state=actor), obs, goals))
    direction = goals - obs
    cosine = np.sum(actions * direction, 1) / (np.linalg.norm(actions, axis=1) * np.linalg.norm(direction, axis=1))
    assert np.median(cosine) > 0.9


@pytest.mark.slow  # ~25 s; agents vmapping over seeds is also checked in tests/test_multidevice.py
def test_seeds_vmapped_update_as_each_seed_alone():
    agents = jax.vmap(lambda s: QRLContinuousAgent.create(TINY, s))(jnp.arange(3))
    updated, metrics = jax.jit(jax.vmap(QRLContinuousAgent.update, in_axes=(0, None)))(agents, batch())
    assert metrics["actor_loss"].shape == (3,)
    for seed in range(3):
        alone, alone_metrics = jax.jit(QRLContinuousAgent.update)(QRLContinuousAgent.create(TINY, seed), batch())
        for name, value in alone_metrics.items():  # float32 sums in another order: a few ulps of each value
            np.testing.assert_allclose(metrics[name][seed], value, rtol=1e-5, atol=1e-6, err_msg=name)
        for vmapped, lone in zip(jax.tree.leaves(jax.tree.map(lambda x: x[seed], updated)), jax.tree.leaves(alone)):
            np.testing.assert_allclose(vmapped, lone, rtol=1e-5, atol=1e-6)
    assert not np.allclose(metrics["actor_loss"][0], metrics["actor_loss"][1])  # the seeds are different agents


def test_bad_batches_and_configs():
    agent = QRLContinuousAgent.create(TINY, 0)
    bad = dict(batch(), actions=np.zeros((32, 3), np.float32))
    with pytest.raises(ValueError, match=r"batch\['actions'\] must have shape \(32, 2\)"):
        agent.update(bad)
    with pytest.raises(ValueError, match="missing keys"):
        agent.update({k: v for k, v in batch().items() if k != "goals"})
    with pytest.raises(ValueError, match="num_critics"):
        QRLContinuousConfig(num_critics=0)
    with pytest.raises(ValueError, match=r"QRLContinuousConfig\.iqe_components must be >= 1"):
        dataclasses.replace(TINY, iqe_components=0)  # the shared critic checks name the config built
    assert math.isclose(TINY.entropy_target, -2.0)


def test_the_critic_config_is_the_discrete_agents():
    """Both QRL agents build one critic type from their flat fields: equal fields, equal critic configs."""
    from platonic_rl.agents.qrl import QRLConfig, QuasimetricCriticConfig

    critic = TINY.critic_config
    assert isinstance(critic, QuasimetricCriticConfig) and critic.head_dim == 4 * 8 and critic.image_shape is None
    fields = {f.name: getattr(critic, f.name) for f in dataclasses.fields(critic) if f.name != "image_shape"}
    assert QRLConfig(**fields).critic_config == critic
    images = dataclasses.replace(TINY, **IMAGE_DEFAULTS).critic_config
    assert images.image_shape == (64, 64, 3) and images.transition_weight == 0.1


@pytest.mark.slow  # ~25 s (a conv update compile); the Fetch env and buffer image paths have fast tests
def test_image_observations_use_conv_backbones():
    """64x64 uint8 frames: every critic and the actor own an Atari conv backbone (1024 features)."""
    config = dataclasses.replace(TINY, **{**IMAGE_DEFAULTS, "encoder_hidden": (16,)})
    agent = QRLContinuousAgent.create(config, 0)
    conv = agent.critic_params["params"]["backbone"]
    assert conv["Conv_0"]["kernel"].shape == (2, 8, 8, 3, 32)  # stacked over the two critics
    assert agent.critic_params["params"]["encoder"]["Dense_0"]["kernel"].shape == (2, 1024, 16)
    assert "AtariConvBackbone_0" in agent.actor_params["params"]
    rng = np.random.default_rng(0)
    frames = lambda: rng.integers(0, 256, (4, 64, 64, 3), dtype=np.uint8)  # noqa: E731
    images = dict(observations=frames(), next_observations=frames(), goals=frames(),
                  actions=rng.uniform(-1, 1, (4, 2)).astype(np.float32), rewards=-np.ones(4, np.float32))
    new, metrics = jax.jit(QRLContinuousAgent.update)(agent, images)
    assert np.isfinite(metrics["critic0/push_loss"]) and config.transition_weight == 0.1
    assert not np.allclose(new.critic_params["params"]["backbone"]["Conv_0"]["kernel"], conv["Conv_0"]["kernel"])
    assert new.act(images["observations"], images["goals"]).shape == (4, 2)
    with pytest.raises(ValueError, match="64, 64, 3"):
        new.act(np.zeros((4, 5), np.float32), np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="observations"):
        QRLContinuousAgent.update(agent, batch())


def test_behaviour_cloning_is_the_dataset_actions_nll_and_entropy_can_be_off():
    """bc_weight * E[-log pi(a | s, g_bc)] (the official QRL/CRL offline code's BC); adaptive_entropy=False
    drops alpha log pi from the actor loss and keeps alpha fixed."""
    config = dataclasses.replace(TINY, bc_weight=0.05, adaptive_entropy=False)
    agent = QRLContinuousAgent.create(config, 0)
    b = batch()
    b["bc_goals"] = b["goals"][::-1].copy()
    key = jax.random.PRNGKey(3)
    with_entropy = dataclasses.replace(config, adaptive_entropy=True)
    scaled = dataclasses.replace(config, actor_distance_scale="batch_mean")

    @jax.jit
    def losses_and_references(agent, b):  # the losses (entropy off and on), the policy and the critics' distances
        loss, metrics = agent.actor_loss_fn(agent.actor_params, agent.critic_params, b, key)
        loss_on = agent.replace(config=with_entropy).actor_loss_fn(agent.actor_params, agent.critic_params, b, key)[0]
        loss_scaled = agent.replace(config=scaled).actor_loss_fn(agent.actor_params, agent.critic_params, b, key)[0]
        bc_policy = agent.policy.apply(agent.actor_params, b["observations"], b["bc_goals"])
        mean, log_std = agent.policy.apply(agent.actor_params, b["observations"], b["goals"])
        actions, _ = tanh_normal_sample(key, mean, log_std)
        distances = agent.goal_distances_after(agent.critic_params, b["observations"], actions, b["goals"])
        # The distance term's gradients alone (no BC), as the paper's and divided by its batch mean.
        grads = [jax.grad(lambda p, c=c: agent.replace(config=dataclasses.replace(c, bc_weight=0.0)).actor_loss_fn(
            p, agent.critic_params, b, key)[0])(agent.actor_params) for c in (config, scaled)]
        return loss, metrics, loss_on, loss_scaled, bc_policy, distances, grads

    loss, metrics, loss_on, loss_scaled, (mean, log_std), distances, grads = losses_and_references(agent, b)
    nll = _tanh_normal_nll_numpy(mean, log_std, b["actions"])
    np.testing.assert_allclose(metrics["bc_nll"], nll, rtol=1e-5)
    mean_distance = float(np.max(np.asarray(distances), 0).mean())
    expected = mean_distance + 0.05 * nll  # no alpha log pi term
    assert abs(float(loss) - expected) <= 1e-4 * (1 + abs(expected))
    assert abs(float(loss_on) - expected) > 1e-3  # alpha = 1 adds E[log pi]
    # actor_distance_scale="batch_mean" (OGBench's QRL): the distances (>= 0) over their mean, a term of exactly 1,
    # whose gradients are the paper's divided by that mean.
    assert float(loss_scaled) == pytest.approx(1.0 + 0.05 * nll, rel=1e-5)
    for paper, divided in zip(jax.tree.leaves(grads[0]), jax.tree.leaves(grads[1])):
        np.testing.assert_allclose(divided, paper / mean_distance, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="actor_distance_scale must be 'none' or 'batch_mean', got 'max'"):
        dataclasses.replace(TINY, actor_distance_scale="max")
    new, metrics = jax.jit(QRLContinuousAgent.update)(agent, b)
    assert float(new.log_entropy_weight) == float(agent.log_entropy_weight) and float(metrics["entropy_weight"]) == 0


def test_crl_behaviour_cloning_is_the_dataset_actions_nll():
    from platonic_rl.agents.crl import CRLAgent, CRLConfig

    config = CRLConfig(obs_dim=5, action_dim=2, hidden=(16,), repr_dim=8, actor_hidden=(16,), bc_weight=0.05)
    agent = CRLAgent.create(config, 0)
    b = batch()

    @jax.jit
    def bc_nll_and_policy(agent, b):
        _, metrics = agent.actor_loss(agent.actor_params, agent.critic_params, b, jax.random.PRNGKey(0))
        return metrics, agent.policy.apply(agent.actor_params, jnp.concatenate([b["observations"], b["goals"]], -1))

    metrics, (mean, log_std) = bc_nll_and_policy(agent, b)
    np.testing.assert_allclose(metrics["bc_nll"], _tanh_normal_nll_numpy(mean, log_std, b["actions"]), rtol=1e-5)


def test_the_critic_loss_with_its_distances_fused_equals_the_loss_read_distance_by_distance():
    """The critic loss computes its four distances in one projector pass and one head call; here each is its own
    d(z1, z2) call, as eq. 4.12 and the transition loss read. Values and gradients agree to float32 rounding."""
    from platonic_rl.agents.qrl import QuasimetricCritic, quasimetric_critic_loss

    config = QRLContinuousConfig(obs_dim=5, action_dim=2, encoder_hidden=(32,), latent_dim=16,
                                 projector_hidden=(32,), iqe_components=4, iqe_dim_per_component=8,
                                 dynamics_hidden=(32,))
    agent = QRLContinuousAgent.create(config, 0)
    c = config.critic_config
    rng = np.random.default_rng(0)
    obs, nxt, goals = (jnp.asarray(rng.normal(size=(12, 5)), jnp.float32) for _ in range(3))
    actions, rewards = jnp.asarray(rng.uniform(-1, 1, (12, 2)), jnp.float32), -jnp.ones(12)
    mask = jnp.arange(12) % 3 != 0
    params, lagrange_raw = jax.tree.map(lambda x: x[0], agent.critic_params), agent.lagrange_raw[0]

    def by_distance(params, lagrange_raw):
        critic = QuasimetricCritic(c)
        z, z_next, z_goal = (critic.apply(params, x, method="encode") for x in (obs, nxt, goals))
        dist = lambda a, b: critic.apply(params, a, b, method="distance")  # noqa: E731
        violation = losses.constraint_violation(dist(z, z_next), rewards)
        model_term, multiplier_loss, _ = losses.lagrangian_terms(violation, lagrange_raw, c.epsilon)
        push = losses.push_loss(dist(z, z_goal), lambda d: losses.softplus_phi(d, c.phi_offset, c.phi_beta))
        z_pred = critic.apply(params, z, actions, method="dynamics")
        transition = losses.transition_loss(dist, z_pred, z_next, mask)
        return push + model_term + c.transition_weight * transition + multiplier_loss

    def fused(params, lagrange_raw):
        return quasimetric_critic_loss(c, params, lagrange_raw, obs, nxt, goals, actions, rewards, mask)[0]

    want, want_grads = jax.value_and_grad(by_distance, argnums=(0, 1))(params, lagrange_raw)
    got, got_grads = jax.value_and_grad(fused, argnums=(0, 1))(params, lagrange_raw)
    assert float(got) == pytest.approx(float(want), rel=1e-6)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
