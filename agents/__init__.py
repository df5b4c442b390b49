"""Importable agents: immutable pytrees with jitted ``update`` and ``act``."""
from platonic_rl.agents.crl import CRLAgent, CRLConfig
from platonic_rl.agents.ddpg_her import DDPGHERAgent, DDPGHERConfig
from platonic_rl.agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from platonic_rl.agents.gcbc import GCBCAgent, GCBCConfig
from platonic_rl.agents.qrl import QRLAgent, QRLConfig
from platonic_rl.agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig

__all__ = ["CRLAgent", "CRLConfig", "DDPGHERAgent", "DDPGHERConfig", "DenoisedMDPAgent", "DenoisedMDPConfig",
           "GCBCAgent", "GCBCConfig", "QRLAgent",
           "QRLConfig", "QRLContinuousAgent", "QRLContinuousConfig"]
