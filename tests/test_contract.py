"""The agent contract is checked before anything compiles; the registry builds every agent by name."""
import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from platonic_rl import agents
from platonic_rl.agents.common import StatelessPolicy
from platonic_rl.agents.contract import check_agent
from platonic_rl.training.goal_online import OnlineConfig, train_online
from platonic_rl.training.offline import TrainConfig, train_offline

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import update_fixtures  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Config:
    size: int = 1


class NoUpdate(StatelessPolicy):
    config = Config()

    def act(self, observations, goals, rng=None):
        return observations


def test_an_object_without_update_is_refused_by_every_loop_before_any_compile(monkeypatch):
    import jax

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled before the contract check")

    monkeypatch.setattr(jax, "jit", no_compiling)
    data = dict(observations=np.zeros((4, 2)), actions=np.zeros(4, np.int32), next_observations=np.zeros((4, 2)),
                rewards=-np.ones(4))
    with pytest.raises(TypeError, match=r"NoUpdate is not an agent .* no callable \['update'\]"):
        train_offline(NoUpdate(), data, TrainConfig(steps=10, log_every=10, progress=False))
    with pytest.raises(TypeError, match=r"no callable \['update'\]"):
        train_online(NoUpdate(), OnlineConfig(env_steps=20_000))


def test_configs_must_be_frozen_hashable_dataclasses_and_acting_needs_step():
    class DictConfig(NoUpdate):
        config = {"size": 1}

        def update(self, batch):
            return self, {}

    with pytest.raises(TypeError, match="config must be a frozen dataclass"):
        check_agent(DictConfig())

    class ActOnly:
        config = Config()

        def update(self, batch):
            return self, {}

        def act(self, observations, goals, rng=None):
            return observations

    with pytest.raises(TypeError, match=r"no callable \['initial_policy_state', 'step'\]"):
        check_agent(ActOnly())


def test_one_acting_signature_for_every_agent():
    """step(policy_state, observations, goals, prev_actions, rng) -> (actions, policy_state): act for the
    goal-conditioned agents (state None), the filter's step for the recurrent ones."""
    import jax

    rng = np.random.default_rng(0)
    obs, goals = rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(3, 2)).astype(np.float32)
    crl = agents.make("crl", obs_dim=2, action_dim=2, hidden=(8,), repr_dim=4, actor_hidden=(8,))
    state = crl.initial_policy_state(3)
    actions, state = crl.step(state, obs, goals, None, jax.random.PRNGKey(1))
    assert state is None
    np.testing.assert_array_equal(actions, crl.act(obs, goals, jax.random.PRNGKey(1)))
    # The recorded "denoised_imagine" case's agent (tests/fixtures/update_fixtures.py; 5-d observations): its
    # create compiles once per suite.
    denoised = agents.DenoisedMDPAgent.create(update_fixtures.world_model_config(), 0)
    obs = rng.normal(size=(3, 5)).astype(np.float32)
    latent = denoised.initial_policy_state(3)
    prev = np.zeros((3, 2), np.float32)
    actions, new_latent = denoised.step(latent, obs, None, prev, 0)
    expected, expected_latent = denoised.act(latent, obs, prev, 0)
    np.testing.assert_array_equal(actions, expected)
    assert jax.tree.all(jax.tree.map(np.array_equal, new_latent, expected_latent))
    with pytest.raises(ValueError, match="prev_actions .* are required"):
        denoised.step(latent, obs, None)
    for entry in agents.REGISTRY.values():
        assert callable(getattr(entry.agent, "step")) and callable(getattr(entry.agent, "initial_policy_state"))


def test_the_registry_builds_every_agent_by_name_with_config_overrides():
    assert set(agents.REGISTRY) == {"qrl", "qrl_continuous", "crl", "gcbc", "gcivl", "gciql", "hiql", "ddpg_her",
                                    "denoised_mdp", "dreamer"}
    crl = agents.make_config("crl", obs_dim=3, action_dim=2, hidden=(8,))
    assert isinstance(crl, agents.CRLConfig) and crl.hidden == (8,)
    dreamer = agents.make_config("dreamer")
    assert dreamer.model.y_state == 0 and dreamer.model.z_state == 0
    gcbc = agents.make("gcbc", seed=1, obs_dim=2, action_dim=2, hidden=(4,))
    check_agent(gcbc)
    with pytest.raises(KeyError, match="unknown agent 'ppo'"):
        agents.make("ppo")
    with pytest.raises(TypeError, match="unexpected keyword"):
        agents.make_config("gcbc", widths=(4,))


def test_host_policy_carries_the_policy_state_until_reset_and_evaluations_reset_it():
    import flax.struct
    import jax.numpy as jnp

    from platonic_rl.agents.contract import host_policy
    from platonic_rl.training.goal_online import evaluate, evaluate_rates

    class Clock(flax.struct.PyTreeNode):
        """Acts with the number of steps taken since its state began."""

        def initial_policy_state(self, batch_size):
            return jnp.zeros((batch_size, 1))

        def step(self, policy_state, observations, goals, prev_actions=None, rng=None):
            return policy_state, policy_state + 1

    policy, obs = host_policy(Clock()), np.zeros((2, 3), np.float32)
    assert [float(policy(obs, obs)[0, 0]) for _ in range(3)] == [0.0, 1.0, 2.0]
    policy.reset()
    assert float(policy(obs, obs)[0, 0]) == 0.0

    class ThreeStepEnv:  # success when the policy's third action is 2: it began the batch's episodes afresh
        num_envs = 2    # (and at the goal at the end in the first sub-env only)

        def rollout(self, policy, seed, renderer=None):
            actions = [policy(obs, obs) for _ in range(3)]
            return dict(success=actions[-1][:, 0] == 2.0, final_success=np.array([True, False]))

    assert evaluate(policy, ThreeStepEnv(), episodes=6, seed=0) == 1.0  # three batches, each from a fresh state
    # 5 episodes: batches of 2, 2, 1; at the end in episodes 0, 2 and 4.
    assert evaluate_rates(policy, ThreeStepEnv(), episodes=5, seed=0) == dict(success=1.0, at_goal_at_end=0.6)
