"""The agent contract is checked before anything compiles; the registry builds every agent by name."""
import dataclasses

import numpy as np
import pytest

from platonic_rl import agents
from platonic_rl.agents.contract import check_agent
from platonic_rl.training.goal_online import OnlineConfig, train_online
from platonic_rl.training.offline import TrainConfig, train_offline


@dataclasses.dataclass(frozen=True)
class Config:
    size: int = 1


class NoUpdate:
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


def test_configs_must_be_frozen_hashable_dataclasses_and_recurrent_agents_need_a_latent():
    class DictConfig(NoUpdate):
        config = {"size": 1}

        def update(self, batch):
            return self, {}

    with pytest.raises(TypeError, match="config must be a frozen dataclass"):
        check_agent(DictConfig())

    class Stateless(NoUpdate):
        def update(self, batch):
            return self, {}

    check_agent(Stateless())
    with pytest.raises(TypeError, match=r"no callable \['initial_latent'\]"):
        check_agent(Stateless(), recurrent=True)


def test_the_registry_builds_every_agent_by_name_with_config_overrides():
    assert set(agents.REGISTRY) == {"qrl", "qrl_continuous", "crl", "gcbc", "ddpg_her", "denoised_mdp", "dreamer"}
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
