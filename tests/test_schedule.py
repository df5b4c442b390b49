"""Evaluation schedule, checkpoint-if-due and episode seeds: the numbers the loops used before, kept."""
import pytest

from platonic_rl.training.schedule import (EXPLORATION_STREAM, EvaluationSchedule, checkpoint_due, episode_seed,
                                           eval_seed)


def test_evaluations_happen_when_the_count_passes_each_multiple_and_at_the_end():
    schedule = EvaluationSchedule(every=2000, step=0)
    steps = [500 * i for i in range(1, 13)]  # cycles of 500 env steps up to 6000
    due = [s for s in steps if schedule.due(s, final=s == 6000)]
    assert due == [2000, 4000, 6000]
    resumed = EvaluationSchedule(every=2000, step=2500)  # a resumed run continues the schedule
    assert [s for s in (3000, 3500, 4000, 4500) if resumed.due(s, final=False)] == [4000]
    with pytest.raises(ValueError, match="every"):
        EvaluationSchedule(every=0, step=0)


def test_checkpoints_are_due_every_n_units_and_at_the_end_unless_disabled():
    assert [c for c in range(1, 8) if checkpoint_due(c, 3, final=c == 7)] == [3, 6, 7]
    assert not any(checkpoint_due(c, 0, final=True) for c in range(1, 5))


def test_seeds_are_the_loops_historical_formulas():
    assert episode_seed(2, 7) == 2 * 1_000_003 + 7
    assert episode_seed(2, 7, EXPLORATION_STREAM) == 2 * 1_000_003 + 500_000 + 7
    assert eval_seed(4000) == 10_004_000
