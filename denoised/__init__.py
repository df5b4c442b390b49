"""Denoised MDP: factored world models (x controllable/reward-relevant, y uncontrollable, z irrelevant).

Not implemented yet; see the issue tracker.
"""
