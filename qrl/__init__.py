"""Quasimetric RL core: quasimetric heads (:mod:`platonic_rl.qrl.quasimetrics`), losses (:mod:`platonic_rl.qrl.losses`) and the
offline training loop (:mod:`platonic_rl.qrl.train`)."""
