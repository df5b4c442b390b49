"""Runnable benchmark scripts (``python -m platonic_rl.benchmarks.<name>``) that print and save tables and plots."""
