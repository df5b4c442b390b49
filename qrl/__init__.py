"""Quasimetric RL core: quasimetric heads (:mod:`platonic_rl.qrl.quasimetrics`) and the QRL objective's terms
(:mod:`platonic_rl.qrl.losses`). The agents are in :mod:`platonic_rl.agents`, their training loops in
:mod:`platonic_rl.training`."""
