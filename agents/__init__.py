"""Importable agents: immutable pytrees with jitted ``update`` and ``act``."""
from agents.qrl import QRLAgent, QRLConfig

__all__ = ["QRLAgent", "QRLConfig"]
