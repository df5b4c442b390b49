"""Denoised MDP (dissertation chapter 5): the factored world model and its losses, as pure functions.

* :mod:`platonic_rl.denoised.model`: the factored RSSM (x controllable and reward-relevant, y uncontrollable, optional
  z reward-irrelevant), filtering in one ``lax.scan`` (``observe``) and x-only imagination (``imagine_x``).
* :mod:`platonic_rl.denoised.losses`: eq. 5.4 with free nats on KL_x (and the KL-x split), lambda-returns, the
  imagination actor/value losses and latent-SAC losses.

The agent that composes them is :class:`platonic_rl.agents.denoised_mdp.DenoisedMDPAgent` (Dreamer = its x-only
configuration); the online loop of Algorithm 1 is :mod:`platonic_rl.training.world_model`.
"""
