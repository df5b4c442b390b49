"""benchmarks/fetch.py: smoothing, the sample-efficiency ratio, agent factories."""
import numpy as np
import pytest

from benchmarks import fetch as bf


def test_smoothing_is_a_trailing_window_of_five():
    np.testing.assert_allclose(bf.smooth([0, 1, 2, 3, 4, 5, 6]), [0, 0.5, 1, 1.5, 2, 3, 4])


def test_efficiency_ratio_as_in_c33():
    steps = np.array([2000, 4000, 6000, 8000, 10000])
    qrl = np.array([0.1, 0.5, 0.8, 0.9, 0.95])
    peer = np.array([0.1, 0.2, 0.3, 0.4, 0.6])
    # QRL first exceeds the peer's final 0.6 at 6000 steps: ratio 10000 / 6000.
    assert bf.efficiency_ratio(steps, qrl, steps, peer) == pytest.approx(10000 / 6000)
    assert bf.efficiency_ratio(steps, peer, steps, qrl) is None


@pytest.mark.parametrize("name", ["qrl", "crl", "gcbc", "ddpg_her", "ddpg_her_mrn", "ddpg_her_iqe"])
def test_agent_factories(name):
    cls, config, overrides = bf.agent_config(name, "push")  # configs only: creating paper-size agents is slow
    assert config.obs_dim == 25 and hasattr(cls, "create")
    assert set(overrides) <= {"exploration_noise", "p_future"}
    with pytest.raises(ValueError, match="unknown agent"):
        bf.make_agent("sac", "reach", 0)


def test_presets_and_image_agents():
    _, cpu, _ = bf.agent_config("qrl", "reach", qrl_preset="cpu")
    assert cpu.iqe_components == 16 and cpu.encoder_hidden == (256, 256)
    assert cpu.transition_weight == 0.2 and cpu.phi_offset == 15.0  # the objective is unchanged
    _, image, _ = bf.agent_config("qrl", "reach", qrl_preset="cpu", obs="image")
    assert image.image_shape == (64, 64, 3) and image.transition_weight == 0.1
    assert image.encoder_hidden == (512,)  # C.3.3: backbone-512-128 for images
    with pytest.raises(ValueError, match="QRL agent only"):
        bf.agent_config("crl", "reach", obs="image")
