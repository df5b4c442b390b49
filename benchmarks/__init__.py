"""Runnable benchmark scripts (``python -m benchmarks.<name>``) that print and save tables and plots."""
