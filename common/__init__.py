"""Building blocks shared by every algorithm: networks (:mod:`platonic_rl.common.networks`).

The lowest room of the suite: it imports nothing of ours, so the algorithm cores (``qrl``, ``denoised``,
``replearn``), the agents and the benchmarks may all import it.
"""
