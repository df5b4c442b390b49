"""When loops evaluate and checkpoint, and which seed each episode gets: written once for every loop.

Seeds: every episode resets its env with a seed derived from the run's seed and the episode's index, so a
resumed run collects exactly the episodes an uninterrupted one would. Evaluations use seeds that depend
only on when they happen (:func:`eval_seed`), so every agent -- and any reference policy -- is evaluated
on the same episodes at the same step. Loops that reset several envs at once give each env its own episode's seed
(:func:`episode_seed` per episode index, :func:`episode_seeds` for an evaluation), so no two episodes of a run
repeat each other.
"""
from __future__ import annotations

EXPLORATION_STREAM = 500_000  # offset of exploration episodes from the (random) prefill episodes


def episode_seed(seed: int, index: int, stream: int = 0) -> int:
    """Seed of training episode ``index`` of a run seeded ``seed`` (``stream`` separates kinds of episodes)."""
    return int(seed) * 1_000_003 + int(stream) + int(index)


def eval_seed(when: int) -> int:
    """Seed of the evaluation at ``when`` (an env-step count or an episode index), the same for every run."""
    return 10_000_000 + int(when)


EPISODES_PER_SEED = 100_000
"""Most episodes one seed of :func:`episode_seeds` names (an evaluation of more is refused)."""


def episode_seeds(seed: int, episodes: int) -> list[int]:
    """Reset seeds of ``episodes`` episodes that ``seed`` stands for (e.g. one evaluation's): episode k gets
    ``seed * EPISODES_PER_SEED + k``. The episodes of one seed, and those of two different seeds, never share a
    reset seed -- unlike seeding a gymnasium vector env with one int, which gives sub-env j the seed ``seed + j``,
    so that seeds s and s + 1 replay all but one of each other's episodes."""
    if not 0 <= int(episodes) <= EPISODES_PER_SEED:
        raise ValueError(f"episode_seeds: episodes must be in [0, {EPISODES_PER_SEED}], got {episodes}")
    if int(seed) < 0:
        raise ValueError(f"episode_seeds: seed must be >= 0, got {seed}")
    return [int(seed) * EPISODES_PER_SEED + k for k in range(int(episodes))]


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
