"""Importable agents: immutable pytrees with jitted ``update`` and ``act`` (the contract:
:mod:`platonic_rl.agents.contract`), and a registry to build them by name::

    from platonic_rl import agents
    agent = agents.make("crl", seed=0, obs_dim=10, action_dim=4)     # config fields as keywords
    qrl = agents.make("qrl_continuous", preset="offline", obs_dim=4, action_dim=2)   # a named regime, then fields
    sorted(agents.REGISTRY), agents.REGISTRY["qrl_continuous"].presets
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.ddpg_her import DDPGHERAgent, DDPGHERConfig
from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.gciql import GCIQLAgent, GCIQLConfig
from platonic_rl.agents.gcivl import GCIVLAgent, GCIVLConfig
from platonic_rl.agents.hiql import HIQLAgent, HIQLConfig
from platonic_rl.agents.qrl import QRLAgent, QRLConfig
from platonic_rl.agents.qrl_continuous import PRESETS as QRL_PRESETS
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig
from platonic_rl.denoised.model import WorldModelConfig


@dataclasses.dataclass(frozen=True)
class Entry:
    agent: type
    config: Callable[..., Any]  # keyword overrides -> config
    description: str
    presets: dict[str, dict] = dataclasses.field(default_factory=dict)  # named regimes: config fields, before overrides


REGISTRY: dict[str, Entry] = {
    "qrl": Entry(QRLAgent, QRLConfig, "Quasimetric RL, discrete actions (offline, e.g. MountainCar)"),
    "qrl_continuous": Entry(QRLContinuousAgent, QRLContinuousConfig,
                            "Quasimetric RL, continuous actions: two critics, tanh-Normal actor (presets: online, the "
                            "Fetch defaults; offline, for your own dataset)", QRL_PRESETS),
    "crl": Entry(CRLAgent, CRLConfig, "Contrastive RL (binary NCE or InfoNCE critic)"),
    "gcbc": Entry(GCBCAgent, GCBCConfig, "goal-conditioned behaviour cloning"),
    "gcivl": Entry(GCIVLAgent, GCIVLConfig, "goal-conditioned implicit V-learning (OGBench's GCIVL: expectile value, "
                   "AWR actor; offline)"),
    "gciql": Entry(GCIQLAgent, GCIQLConfig, "goal-conditioned implicit Q-learning (OGBench's GCIQL: expectile value, "
                   "two critics, DDPG+BC actor; offline)"),
    "hiql": Entry(HIQLAgent, HIQLConfig, "hierarchical implicit Q-learning (OGBench's HIQL: GCIVL's value through a "
                  "subgoal representation, high and low AWR actors; offline)"),
    "ddpg_her": Entry(DDPGHERAgent, DDPGHERConfig, "DDPG with hindsight relabelling (MLP, MRN or IQE critic)"),
    "denoised_mdp": Entry(DenoisedMDPAgent, DenoisedMDPConfig, "Denoised MDP world model + policy in x"),
    "dreamer": Entry(DenoisedMDPAgent,
                     lambda model=None, **kw: DenoisedMDPConfig.dreamer(model or WorldModelConfig.dreamer(), **kw),
                     "Dreamer: the x-only Denoised MDP (default x latent 220 + 33, Table D.4's parameter match)"),
}


def make_config(name: str, preset: str | None = None, **overrides) -> Any:
    """The config of agent ``name``: its ``preset``'s fields (a named regime, e.g. QRL's ``offline``; default: the
    config's own defaults), then ``overrides`` (its fields as keywords)."""
    if name not in REGISTRY:
        raise KeyError(f"unknown agent {name!r}; known: {sorted(REGISTRY)}")
    entry = REGISTRY[name]
    if preset is not None:
        if preset not in entry.presets:
            known = sorted(entry.presets) or "none"
            raise KeyError(f"agent {name!r} has no preset {preset!r}; its presets: {known}")
        overrides = {**entry.presets[preset], **overrides}
    return entry.config(**overrides)


def make(name: str, seed: int = 0, preset: str | None = None, **overrides) -> Any:
    """Agent ``name`` built from its config (:func:`make_config`: ``preset``, then ``overrides``), initialised from
    ``seed``."""
    config = make_config(name, preset, **overrides)
    return REGISTRY[name].agent.create(config, seed)


__all__ = ["CRLAgent", "CRLConfig", "DDPGHERAgent", "DDPGHERConfig", "DenoisedMDPAgent", "DenoisedMDPConfig",
           "GCBCAgent", "GCBCConfig", "GCIQLAgent", "GCIQLConfig", "GCIVLAgent", "GCIVLConfig", "HIQLAgent", "HIQLConfig",
           "QRLAgent", "QRLConfig", "QRLContinuousAgent", "QRLContinuousConfig",
           "REGISTRY", "make", "make_config",
           # the submodules, so that the API reference (pdoc) documents each of them
           "common", "contract", "crl", "ddpg_her", "denoised_mdp", "gcbc", "gciql", "gcivl", "hiql", "qrl", "qrl_continuous", "qrl_diagnostics",
           "qrl_policies", "seeds"]
