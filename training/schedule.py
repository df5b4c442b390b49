"""When loops evaluate and checkpoint, and which seed each episode gets: written once for every loop.

Seeds: every episode resets its env with a seed derived from the run's seed and the episode's index, so a
resumed run collects exactly the episodes an uninterrupted one would. Evaluations use seeds that depend
only on when they happen (:func:`eval_seed`), so every agent -- and any reference policy -- is evaluated
on the same episodes at the same step.
"""
from __future__ import annotations

EXPLORATION_STREAM = 500_000  # offset of exploration episodes from the (random) prefill episodes


def episode_seed(seed: int, index: int, stream: int = 0) -> int:
    """Seed of training episode ``index`` of a run seeded ``seed`` (``stream`` separates kinds of episodes)."""
    return int(seed) * 1_000_003 + int(stream) + int(index)


def eval_seed(when: int) -> int:
    """Seed of the evaluation at ``when`` (an env-step count or an episode index), the same for every run."""
    return 10_000_000 + int(when)


def checkpoint_due(count: int, every: int, final: bool) -> bool:
    """Checkpoint after the ``count``-th unit (cycle, episode, logged step) if ``every`` divides it or the run
    ends; ``every`` = 0 disables checkpoints."""
    return bool(every) and (count % every == 0 or final)


class EvaluationSchedule:
    """Evaluate whenever the step count passes the next multiple of ``every`` (and at the end of the run)."""

    def __init__(self, every: int, step: int):
        if every < 1:
            raise ValueError(f"EvaluationSchedule: every must be >= 1, got {every}")
        self.every = every
        self.next = (step // every + 1) * every

    def due(self, step: int, final: bool) -> bool:
        """Whether to evaluate now, at ``step``; advances the schedule when it is."""
        if step >= self.next or final:
            self.next += self.every
            return True
        return False
