"""Quasimetric RL core: quasimetric heads (:mod:`qrl.quasimetrics`), losses (:mod:`qrl.losses`) and the
offline training loop (:mod:`qrl.train`)."""
