"""Importable agents: immutable pytrees with jitted ``update`` and ``act``."""
from agents.crl import CRLAgent, CRLConfig
from agents.ddpg_her import DDPGHERAgent, DDPGHERConfig
from agents.denoised_mdp import DenoisedMDPAgent, DenoisedMDPConfig
from agents.gcbc import GCBCAgent, GCBCConfig
from agents.qrl import QRLAgent, QRLConfig
from agents.qrl_continuous import QRLContinuousAgent, QRLContinuousConfig

__all__ = ["CRLAgent", "CRLConfig", "DDPGHERAgent", "DDPGHERConfig", "DenoisedMDPAgent", "DenoisedMDPConfig",
           "GCBCAgent", "GCBCConfig", "QRLAgent",
           "QRLConfig", "QRLContinuousAgent", "QRLContinuousConfig"]
