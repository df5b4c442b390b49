"""Shared representation-learning objectives (:mod:`platonic_rl.replearn.objectives`) and metrics.

The QRL objectives live in :mod:`platonic_rl.qrl.losses`.
"""
