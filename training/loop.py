"""The life of a training run, the same in every loop (offline, host-online, world-model, device): its run directory
opened or refused, the latest checkpoint restored, a progress bar, rows logged and kept, checkpoints when due, and
everything closed however the run ends. Each loop keeps only what is its own: how it collects, updates and evaluates.

    with LoopRun.start(state, budget=steps, run_dir=path, settings=settings, resumable=("loop.steps",)) as loop:
        state = loop.state                                     # from the latest checkpoint, if there is one
        while step < steps:
            ...                                                # the loop's own work
            loop.bar.update(n)
            loop.finish_row(row, step, state, due=checkpoint_due(...))
    history = loop.history                                     # every row, earlier invocations' included

Without ``run_dir`` the same loop runs with nothing written: rows are kept in ``history`` only.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterable, Iterator

from platonic_rl.common.progress import progress_bar
from platonic_rl.training.run import RunDirectory


class LoopRun:
    """One run of a training loop (made by :meth:`start`): ``state`` as restored, ``history`` (the rows logged so
    far), ``bar`` (its progress bar) and ``run`` (its :class:`~platonic_rl.training.run.RunDirectory`, or None)."""

    def __init__(self, run: RunDirectory | None, state: Any, bar: Any = None):
        self.run, self.state, self.bar = run, state, bar
        self.history: list[dict] = run.rows if run else []
        self.start_step: int = (run.latest_step or 0) if run else 0
        """The step of the checkpoint the run started from (0 for a fresh run)."""

    @classmethod
    @contextlib.contextmanager
    def start(cls, state: Any, *, budget: int, run_dir: str | os.PathLike | None = None, settings: Any = None,
              resume: bool = True, overwrite: bool = False, resumable: Iterable[str] = (), step_key: str = "step",
              resize_buffer: bool = False, keep: int = 2, tensorboard: bool = False, desc: str = "train",
              unit: str = "step", total: int | None = None, position: Callable[[Any], int] | None = None,
              progress: bool = True) -> Iterator["LoopRun"]:
        """Open ``run_dir`` for a run defined by ``settings`` (:meth:`RunDirectory.open`: refused when the settings
        differ outside ``resumable``, or when it holds a run and neither ``resume`` nor ``overwrite`` is given) and
        restore ``state`` from its latest checkpoint (refused beyond ``budget``, the run's total of ``step_key``).
        The progress bar counts ``unit`` up to ``total`` (default: ``budget``) from ``position(state)`` (default:
        the restored checkpoint's step). The directory's lock and the bar are released when the block ends."""
        run = None
        if run_dir is not None:
            if settings is None:
                raise ValueError("LoopRun.start: a run directory needs the run's settings (settings=...)")
            run = RunDirectory.open(run_dir, settings, resume=resume, overwrite=overwrite, resumable=resumable,
                                    keep=keep, step_key=step_key, tensorboard=tensorboard)
            state = run.restore(state, budget=budget, resize_buffer=resize_buffer)  # closes the run if it fails
        try:
            loop = cls(run, state)
            loop.bar = progress_bar(total=budget if total is None else total, desc=desc, unit=unit,
                                    initial=loop.start_step if position is None else position(state),
                                    disable=not progress, dynamic_ncols=True)
            try:
                yield loop
            finally:
                loop.bar.close()
        finally:
            if run:
                run.close()

    def finish_row(self, row: dict, step: int, state: Any, due: bool) -> dict:
        """The end of an iteration: ``row`` logged in the run directory (which adds ``row_seconds``) and kept in
        ``history``; ``state`` checkpointed at ``step`` when ``due``. Returns the row as logged."""
        if self.run:
            row = self.run.log(row)
        self.history.append(row)
        if self.run and due:
            self.run.save(step, state)
        return row
