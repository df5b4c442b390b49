"""Building blocks shared by every algorithm: networks (:mod:`platonic_rl.common.networks`), tanh-Normal
policies (:mod:`platonic_rl.common.policies`), shared RL losses (:mod:`platonic_rl.common.losses`) and the
train state every agent updates its parameters with (:mod:`platonic_rl.common.train_state`).

The lowest room of the suite: it imports nothing of ours, so the algorithm cores (``qrl``, ``denoised``,
``replearn``), the agents and the benchmarks may all import it.
"""
