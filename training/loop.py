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

A run with a run directory stops cleanly on SIGTERM (a preempted VM, a batch scheduler's time limit) and SIGINT
(Ctrl-C): the compiled call in flight finishes, the row is logged, a checkpoint is written at that step, the lock is
released, and the process exits with one line naming the step and :data:`PREEMPTED_EXIT_CODE` (75, ``EX_TEMPFAIL``:
run the same command again to resume). A second signal while it saves stops at once; the previous checkpoint is
untouched (orbax writes a checkpoint aside and renames it when complete).

In a multi-process run (``jax.distributed``), SIGTERM is JAX's: its preemption notifier, which
``jax.distributed.initialize`` installs, catches it in any process and tells the others; every process calls
``jax.experimental.multihost_utils.reached_preemption_sync_point`` at each row and all of them stop, with their
checkpoint saved, at the same step (the first that every process had yet to reach), and exit with the same status.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterable, Iterator

from platonic_rl.common.progress import progress_bar
from platonic_rl.training.run import RunDirectory

PREEMPTED_EXIT_CODE = 75
"""The exit status of a run stopped by SIGTERM or SIGINT after saving its checkpoint (``EX_TEMPFAIL`` of
sysexits.h: a temporary failure; the same command resumes the run)."""
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(SystemExit):
    """A run stopped by a signal (:data:`STOP_SIGNALS`) at ``step``, its checkpoint there saved. A ``SystemExit``
    with :data:`PREEMPTED_EXIT_CODE`: uncaught, the process ends with that status and no traceback."""

    def __init__(self, step: int, signum: int, checkpoint: str):
        super().__init__(PREEMPTED_EXIT_CODE)
        self.step, self.signum, self.checkpoint = step, signum, checkpoint
        self.message = (f"{signal.Signals(signum).name} received: stopped at step {step:,} with its checkpoint saved "
                        f"({checkpoint}); run the same command again to resume (exit status {PREEMPTED_EXIT_CODE})")

    def __str__(self) -> str:
        return self.message


class _StopSignals:
    """SIGTERM and SIGINT noted (``received``) instead of ending the process, while installed (main thread only);
    a second one restores the previous handlers and is delivered to them at once."""

    def __init__(self):
        self.received: int | None = None
        self._previous = {s: signal.signal(s, self._note) for s in STOP_SIGNALS}

    def stop_due(self) -> bool:
        """Whether to stop at this row (called once at each row where the state can be saved)."""
        return self.received is not None

    def _note(self, signum, frame):
        if self.received is not None:  # the second: no more waiting
            self.restore()
            signal.raise_signal(signum)
            return
        self.received = signum
        print(f"{signal.Signals(signum).name} received: finishing the current step to save a checkpoint (send it "
              "again to stop at once)", file=sys.stderr, flush=True)

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    @classmethod
    def install(cls) -> "_StopSignals | _PreemptionSync | None":
        """Installed in the main thread of a single-process run; a multi-process run gets :class:`_PreemptionSync`
        (SIGTERM is JAX's preemption notifier's, which ``jax.distributed`` installs)."""
        import jax

        if jax.process_count() > 1:
            return _PreemptionSync.install()
        if threading.current_thread() is not threading.main_thread():
            return None
        return cls()


class _PreemptionSync:
    """A multi-process run's stop: JAX's preemption sync point, asked at every row where the state can be saved.
    All processes ask it equally often (their loops run in lockstep), so they agree on the row to stop at. The count
    it is asked with grows over the process's life (runs one after another included), as JAX's protocol needs."""

    received = signal.SIGTERM  # the notice JAX's preemption notifier listens for
    _asked = itertools.count()

    def stop_due(self) -> bool:
        from jax.experimental import multihost_utils

        return multihost_utils.reached_preemption_sync_point(next(self._asked))

    def restore(self) -> None:
        pass

    @classmethod
    def install(cls) -> "_PreemptionSync | None":
        """None where JAX's preemption service is off (``jax_enable_preemption_service``): SIGTERM then ends the
        processes as it would without a run directory."""
        from jax.experimental import multihost_utils

        try:
            multihost_utils.reached_preemption_sync_point(next(cls._asked))
        except RuntimeError:
            return None
        return cls()


class LoopRun:
    """One run of a training loop (made by :meth:`start`): ``state`` as restored, ``history`` (the rows logged so
    far), ``bar`` (its progress bar) and ``run`` (its :class:`~platonic_rl.training.run.RunDirectory`, or None)."""

    def __init__(self, run: RunDirectory | None, state: Any, bar: Any = None, signals: _StopSignals | None = None):
        self.run, self.state, self.bar, self._signals = run, state, bar, signals
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
        the restored checkpoint's step). The directory's lock and the bar are released when the block ends. With a
        run directory, SIGTERM and SIGINT stop the run at its next row with a checkpoint (:meth:`finish_row`,
        :class:`Preempted`)."""
        run = None
        if run_dir is not None:
            if settings is None:
                raise ValueError("LoopRun.start: a run directory needs the run's settings (settings=...)")
            run = RunDirectory.open(run_dir, settings, resume=resume, overwrite=overwrite, resumable=resumable,
                                    keep=keep, step_key=step_key, tensorboard=tensorboard)
            state = run.restore(state, budget=budget, resize_buffer=resize_buffer)  # closes the run if it fails
        signals = None
        try:
            signals = _StopSignals.install() if run else None
            loop = cls(run, state, signals=signals)
            loop.bar = progress_bar(total=budget if total is None else total, desc=desc, unit=unit,
                                    initial=loop.start_step if position is None else position(state),
                                    disable=not progress, dynamic_ncols=True)
            try:
                yield loop
            finally:
                loop.bar.close()
        finally:
            try:
                if run:
                    run.close()
            finally:
                if signals is not None:
                    signals.restore()

    def finish_row(self, row: dict, step: int, state: Any, due: bool, at_step: bool = True) -> dict:
        """The end of an iteration: ``row`` logged in the run directory (which adds ``row_seconds``) and kept in
        ``history``; ``state`` checkpointed at ``step`` when ``due``. Returns the row as logged. After a SIGTERM or
        SIGINT, ``state`` is checkpointed at ``step`` (if not already) and :class:`Preempted` is raised; ``at_step``
        False says ``state`` is not the state at ``step`` (a row inside a compiled chunk), so the stop waits for the
        chunk's last row."""
        if self.run:
            row = self.run.log(row)
        self.history.append(row)
        if self.run and due:
            self.run.save(step, state)
        if self._signals is not None and at_step and self._signals.stop_due():
            if not due:
                self.run.save(step, state)
            stop = Preempted(step, self._signals.received, str(self.run.path / "checkpoints" / str(step)))
            print(stop.message, file=sys.stderr, flush=True)
            raise stop
        return row
