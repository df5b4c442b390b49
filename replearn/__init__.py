"""Shared representation-learning objectives (alignment, uniformity, InfoNCE, ...) and metrics.

Not implemented yet; the QRL objectives live in :mod:`qrl.losses` for now.
"""
