"""Shared representation-learning objectives (:mod:`replearn.objectives`) and metrics.

The QRL objectives live in :mod:`qrl.losses`.
"""
