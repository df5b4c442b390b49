"""A run directory, written and read by every training loop.

    run = RunDirectory.open(path, settings, resume=True, resumable=("steps",))
    state = run.restore(state, budget=steps)        # the latest checkpoint, if any (exact resume)
    run.log(row)                                    # metrics.jsonl + metrics.csv (+ TensorBoard), appended
    run.save(step, state)                           # an orbax checkpoint
    run.close()

Layout: ``config.json`` (the exact command that started the run, each command that continued it, the run's latest
settings), ``metrics.jsonl`` and ``metrics.csv`` (one row per logged step, both appended as rows are logged),
``tensorboard/`` (event files, with ``tensorboard=True``; needs the ``tensorboard`` extra:
``pip install "platonic-rl[tensorboard]"``) and ``checkpoints/<step>/`` (orbax, synchronous, the ``keep`` latest).
In a multi-process run (``jax.distributed``) process 0 writes the config, the metrics and the lock, and every
process writes and reads its own part of each checkpoint.

A directory refuses to be misused:

* resuming with other settings is refused, listing the fields that differ (only those named in
  ``resumable``, e.g. the budget, may change), and nothing in the directory is touched; so is a directory written
  in an earlier format (:data:`RUN_FORMAT`);
* a fresh run (``resume=False``) into a directory that holds a run is refused unless ``overwrite=True``,
  which clears the directory first, so checkpoints and metrics of two runs never mix;
* a directory in use by another process (or another open :class:`RunDirectory` of this one) is refused with
  :class:`RunDirectoryInUseError`, naming the holder's process id; the lock (``.run.lock``, an OS file lock taken
  with ``filelock``, or with ``fcntl.flock`` where that package is missing) is released by :meth:`RunDirectory.close` or when the holder's process ends in any way, so a
  killed run (even by SIGKILL) leaves nothing that blocks the next (on a network filesystem, only as far as its
  locks reach across hosts);
* a checkpoint that does not restore (damaged: emptied, truncated, a file missing) is moved to
  ``damaged_checkpoints/`` with a warning naming it and the error, and the run resumes from the newest one that
  restores (its later metrics rows kept in ``metrics.dropped.jsonl``); only when none restores is the run refused,
  with one short message; a checkpoint whose writing was interrupted (``*.orbax-checkpoint-tmp*``) is removed,
  saying so;
* a checkpoint or metrics row that cannot be written (a full disk) stops the run with one line naming the directory,
  the step, the cause and the newest complete checkpoint (a checkpoint the free space cannot hold is refused before
  it is written); a run whose disk has room for fewer than two checkpoints is refused before it starts;
* a damaged last line of ``metrics.jsonl`` (a run killed while writing it) is dropped with a warning, and a
  metrics file that lost rows a checkpoint says were logged is reported, not silently continued.
"""
from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import shutil
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from platonic_rl.common.records import (as_json, default_valued_fields, describe_differences, flat_differences,
                                        read_json, write_json)

try:
    from filelock import FileLock, Timeout
except ImportError:  # an image with only JAX and its kin (an accelerator box): the same OS lock through fcntl
    FileLock, Timeout = None, None


class RunDirectoryError(ValueError):
    """A run directory that cannot be used as asked (other settings, not empty, corrupt checkpoint)."""


class DamagedCheckpointError(RunDirectoryError):
    """A checkpoint that does not restore (damaged, or written by another configuration)."""


class RunWriteError(RunDirectoryError, OSError):
    """A checkpoint or metrics row that could not be written (e.g. a full disk)."""


@contextlib.contextmanager
def _absl_quiet():
    """The ``absl`` logger (orbax's) silenced below CRITICAL for the block."""
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        absl_logger.setLevel(level)


def _state_bytes(state: Any) -> int:
    """The bytes of ``state``'s arrays: what a checkpoint of it takes at most (orbax may compress)."""
    return sum(int(getattr(leaf, "nbytes", 0)) for leaf in jax.tree_util.tree_leaves(state))


def _megabytes(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _write_cause(error: BaseException) -> str:
    """What stopped a write, in a few words: the OS error where the chain or the message holds one."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno is not None:
            return f"{os.strerror(seen.errno)} ({type(seen).__name__}, errno {seen.errno})"
        seen = seen.__cause__ or seen.__context__
    text = str(error)
    for errno_name, code in (("ENOSPC", 28), ("EDQUOT", 122), ("EROFS", 30), ("EACCES", 13)):
        if os.strerror(code) in text or f"os_error_code='{code}'" in text:
            return f"{os.strerror(code)} ({errno_name})"
    return f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"


class RunDirectoryInUseError(RunDirectoryError):
    """A run directory that another process (or another open :class:`RunDirectory`) is writing."""


LOCK_FILE = ".run.lock"
"""The OS lock of a run directory: held while a :class:`RunDirectory` is open, freed when its process ends."""
HOLDER_FILE = ".run.holder"
"""Who holds the lock: a JSON object with ``pid``, ``host``, ``since`` and ``command`` (for the refusal message)."""
LOCK_FILES = (LOCK_FILE, HOLDER_FILE, HOLDER_FILE + ".tmp")
DROPPED_ROWS_FILE = "metrics.dropped.jsonl"
"""Rows a resumed run logs again (logged after the checkpoint it continues from), kept here, appended."""
DAMAGED_DIR = "damaged_checkpoints"
"""Where a checkpoint that does not restore is moved when an earlier one does (``<step>``, ``<step>-2``, ...)."""
RUN_FORMAT = 2
"""The run directory's format, recorded in ``config.json`` as ``format``. A directory of another format (one written
before the field existed is format 1) is refused: its settings do not compare with today's (CHANGELOG.md)."""


def lock_run_directory(path: Path) -> "FileLock | FlockLock":
    """Take ``path``'s lock without waiting, and record this process as its holder. Raises
    :class:`RunDirectoryInUseError` naming the holder's process id if the lock is held."""
    # One hold per process, whatever thread closes it; the lock file is kept on release (removing it while another
    # process waits on it would let two hold it); no silent fallback to a marker file where flock is unavailable.
    if FileLock is not None:
        lock = FileLock(str(path / LOCK_FILE), timeout=0, thread_local=False, fallback_to_soft=False,
                        preserve_lock_file=True)
    else:
        lock = FlockLock(path / LOCK_FILE)
    try:
        lock.acquire()
    except LockHeld if Timeout is None else (Timeout, LockHeld):
        holder = _holder(path)
        who = (f"process {holder.get('pid')} on {holder.get('host')} (since {holder.get('since')}: "
               f"{holder.get('command')})" if holder else "a process that has not yet recorded its id")
        raise RunDirectoryInUseError(
            f"{path} is in use by {who}; two writers of one run directory would mix their checkpoints and metrics. "
            "Wait for that run to end (or stop it), or use another directory. A run that was killed frees its lock "
            "when its process ends.") from None
    except OSError as error:  # a filesystem without flock (some network mounts)
        raise RunDirectoryError(f"{path}: cannot take the run directory's lock {path / LOCK_FILE} ({error}); run "
                                "directories need a filesystem with file locks (flock)") from None
    write_json(path / HOLDER_FILE, dict(pid=os.getpid(), host=socket.gethostname(),
                                        since=time.strftime("%Y-%m-%d %H:%M:%S"), command=" ".join(sys.argv)))
    return lock


class LockHeld(Exception):
    """:class:`FlockLock`: another open file description holds the lock."""


class FlockLock:
    """The run directory's OS lock without the ``filelock`` package (POSIX ``flock``, exclusive, not waiting): what
    :func:`lock_run_directory` takes where ``filelock`` is not installed. Like filelock's, it is freed when the
    process ends in any way, and the lock file is kept on release."""

    def __init__(self, path: Path):
        self.path, self._fd = Path(path), None

    def acquire(self) -> None:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(str(self.path)) from None
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self, force: bool = False) -> None:
        import fcntl

        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _holder(path: Path) -> dict:
    try:
        holder = json.loads((path / HOLDER_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


class MetricsLog:
    """``metrics.jsonl`` and ``metrics.csv``: rows appended as they are logged. On opening, rows after
    ``resume_step`` (by ``row[step_key]``: a run killed after logging but before checkpointing) are moved to
    :data:`DROPPED_ROWS_FILE`, so that the resumed run logs them again once."""

    def __init__(self, directory: Path, resume_step: int, step_key: str = "step"):
        self.jsonl, self.csv = directory / "metrics.jsonl", directory / "metrics.csv"
        self.step_key = step_key
        rows = self.read(directory) if self.jsonl.exists() else []
        self.rows = [r for r in rows if r.get(step_key, 0) <= resume_step]
        last = self.rows[-1].get(step_key, 0) if self.rows else 0
        if resume_step and last < resume_step:
            warnings.warn(f"{self.jsonl} holds rows only up to step {last}, not up to the checkpoint's step "
                          f"{resume_step}: the rows logged in between were lost; the run continues from the "
                          "checkpoint and logs the new rows only", stacklevel=3)
        if len(self.rows) < len(rows):
            aside = directory / DROPPED_ROWS_FILE
            with aside.open("a") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows if r.get(step_key, 0) > resume_step))
            warnings.warn(f"{self.jsonl}: dropped {len(rows) - len(self.rows)} rows logged after step {resume_step}, "
                          f"the checkpoint the run continues from, into {aside} (they are logged again as the run "
                          "continues)", stacklevel=3)
        self._fields: list[str] = []
        self._rewrite()

    @staticmethod
    def read(directory: str | Path) -> list[dict]:
        """The rows of ``directory/metrics.jsonl`` (e.g. of a run in progress). A damaged last line -- a run
        killed while writing it -- is dropped with a warning; a damaged line elsewhere is an error."""
        path = Path(directory) / "metrics.jsonl"
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        rows = []
        for i, line in enumerate(lines):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                if i == len(lines) - 1:
                    warnings.warn(f"{path}: dropped a damaged last line ({error}); a run killed while writing it "
                                  "leaves one", stacklevel=2)
                    break
                raise RunDirectoryError(f"{path}, line {i + 1} is damaged ({error}); only the last line of a "
                                        "killed run can be, so the file was edited or corrupted") from None
        return rows

    def append(self, row: dict) -> None:
        self.rows.append(row)
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row) + "\n")
        new_fields = [k for k in row if k not in self._fields]
        if new_fields:  # a new column (e.g. the first evaluation): rewrite the CSV with the wider header
            self._rewrite()
        else:
            with self.csv.open("a", newline="") as f:
                csv.DictWriter(f, fieldnames=self._fields).writerow(row)

    def _rewrite(self) -> None:
        """Both files from ``rows``, each written beside and then moved over the old one (a kill leaves either)."""
        self._fields = list(dict.fromkeys(k for r in self.rows for k in r))
        temporary = self.jsonl.with_suffix(".jsonl.tmp")
        temporary.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        os.replace(temporary, self.jsonl)
        temporary = self.csv.with_suffix(".csv.tmp")
        with temporary.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self._fields)
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(temporary, self.csv)


class _TensorBoard:
    def __init__(self, directory: Path, purge_step: int):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoard logging needs tensorboardX: pip install \"platonic-rl[tensorboard]\" "
                              "(or tensorboardX), or leave tensorboard off") from None
        # purge_step drops events a killed run wrote after its last checkpoint, as the JSONL log does.
        self.writer = SummaryWriter(str(directory), purge_step=purge_step or None)

    def add(self, row: dict, step: int) -> None:
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RunDirectory:
    """See the module docstring. Build with :meth:`open`."""

    def __init__(self, path: Path, keep: int, step_key: str, tensorboard: bool,
                 lock: "FileLock | FlockLock | None" = None, writer: bool = True):
        self.path, self.step_key, self.tensorboard, self._lock = path, step_key, tensorboard, lock
        self.writer = writer
        """Whether this process writes the directory's own files (config, metrics, lock): process 0 of a
        multi-process run; every process writes its part of each checkpoint."""
        self._closed = False
        self._rows: list[dict] = []  # a non-writer's rows (the writer's are its metrics log's)
        partial = sorted(p.name for p in (path / "checkpoints").glob("*.orbax-checkpoint-tmp*")) if writer else []
        if partial:
            warnings.warn(f"{path / 'checkpoints'}: removing {', '.join(partial)}, a checkpoint whose writing was "
                          "interrupted (the complete ones are kept)", stacklevel=3)
        self.manager = ocp.CheckpointManager(
            (path / "checkpoints").absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False,
                                                 cleanup_tmp_directories=True),
            item_handlers=ocp.StandardCheckpointHandler())  # also reads shapes (metadata)
        self.metrics: MetricsLog | None = None
        self._board: _TensorBoard | None = None
        self._last_row_time = time.time()

    # ------------------------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, settings: dict, *, resume: bool = True, overwrite: bool = False,
             resumable: Iterable[str] = (), keep: int = 2, step_key: str = "step",
             tensorboard: bool = False) -> "RunDirectory":
        """Open ``path`` for a run defined by ``settings`` (a JSON-able dict, e.g. the agent's and the loop's
        configs). ``overwrite`` clears the directory first (whatever ``resume`` says); else ``resume`` continues
        the run it holds, and without it a directory holding a run is refused. ``resumable``: dotted setting
        names that may differ from the stored ones when resuming (e.g. ``"loop.env_steps"``).

        In a multi-process run (``jax.distributed``) every process opens it: process 0 as its writer (the lock, the
        checks, ``config.json``, the metrics), the others once process 0 has opened it (or fail with it); every
        process saves and restores its own part of each checkpoint (orbax)."""
        path = Path(path)
        if jax.process_count() == 1:
            lock = cls._open_as_writer(path, settings, resume, overwrite, resumable)
        else:
            lock, failure = None, None
            if jax.process_index() == 0:
                try:
                    lock = cls._open_as_writer(path, settings, resume, overwrite, resumable)
                except BaseException as error:  # noqa: BLE001 -- told to the other processes, then raised
                    failure = error
            if not _process_zero_says(failure is None):
                if failure is not None:
                    raise failure
                raise RunDirectoryError(f"{path}: process 0 of this run could not open the run directory (its "
                                        "error says why)")
        try:
            return cls(path, keep, step_key, tensorboard, lock, writer=lock is not None)
        except BaseException:
            if lock is not None:
                _release(path, lock)
            raise

    @classmethod
    def _open_as_writer(cls, path: Path, settings: dict, resume: bool, overwrite: bool, resumable: Iterable[str]
                        ) -> "FileLock | FlockLock":
        """The checks and ``config.json`` of :meth:`open`, done by the directory's one writer; returns its lock."""
        defaults = default_valued_fields(settings)
        settings = as_json(settings)

        def contents() -> list[Path]:
            return [p for p in path.iterdir() if p.name not in LOCK_FILES] if path.is_dir() else []

        if overwrite and contents() and not (path / "config.json").exists():
            raise RunDirectoryError(f"{path} is not empty and is not a run directory (no config.json): overwrite "
                                    "only clears run directories; choose another directory")
        path.mkdir(parents=True, exist_ok=True)
        lock = lock_run_directory(path)  # from here on this process is the directory's only writer
        try:
            holds_run = bool(contents())
            if holds_run and overwrite:
                for item in contents():  # the lock stays: it is this process's
                    shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
            elif holds_run and not resume:
                raise RunDirectoryError(f"{path} already holds a run; pass overwrite=True (command lines: --overwrite) "
                                        "to clear it first, resume=True to continue it, or choose another directory")
            config_file = path / "config.json"
            command = " ".join(sys.argv)
            record = dict(format=RUN_FORMAT, command=command, settings=settings)
            if config_file.exists():
                try:
                    saved = json.loads(config_file.read_text())
                except json.JSONDecodeError as error:
                    saved = error
                if not isinstance(saved, dict) or not isinstance(saved.get("settings", {}), dict):
                    why = f"not valid JSON: {saved}" if isinstance(saved, Exception) else "not a JSON object with settings"
                    raise RunDirectoryError(f"{config_file} is not a run's config ({why}); it was edited or damaged. "
                                            "Restore it, or start afresh with overwrite (CLI: --overwrite), which "
                                            "clears the directory")
                if saved.get("format", 1) != RUN_FORMAT:
                    raise RunDirectoryError(
                        f"{path} holds a run of format {saved.get('format', 1)}, written by an earlier version of "
                        f"platonic-rl (this one reads format {RUN_FORMAT}; CHANGELOG.md): its settings cannot be "
                        "compared with today's. Start afresh with overwrite (CLI: --overwrite), which clears it, or "
                        "use another directory.")
                cls._check_settings(path, saved.get("settings", {}), settings, set(resumable), defaults)
                # The command that started the run stays; each one that continues it is added after it. The settings
                # are kept current where some may change (a budget that grew).
                record = dict(format=RUN_FORMAT, command=saved.get("command", command),
                              continued_by=[*saved.get("continued_by", []), command],
                              settings=settings if resumable else saved.get("settings", {}))
            config_file.write_text(json.dumps(record, indent=1))
            return lock
        except BaseException:
            _release(path, lock)
            raise

    @staticmethod
    def _check_settings(path: Path, saved: dict, settings: dict, resumable: set[str], defaults: set[str] = frozenset()
                        ) -> None:
        differ = flat_differences(saved, settings, resumable, defaults)
        if differ:
            raise RunDirectoryError(
                f"{path} holds a run with other settings; continuing it would mix two runs. Differences:\n"
                f"{describe_differences(differ)}\nUse another directory, or start afresh with overwrite (CLI: "
                "--overwrite), which clears it.")

    # ----------------------------------------------------------------------------- checkpoints
    @property
    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    @staticmethod
    def saved_format(path: str | Path) -> int | None:
        """The format of the run directory ``path`` (:data:`RUN_FORMAT`; 1 for one written before formats were
        recorded), read without opening (or locking) it: None where it holds no run."""
        config = Path(path) / "config.json"
        return read_json(config, "a run directory's config").get("format", 1) if config.is_file() else None

    @staticmethod
    def saved_step(path: str | Path) -> int:
        """The step of the latest checkpoint in the run directory ``path``, read without opening (or locking)
        it: 0 when it holds none. A caller that resumes in chunks sizes the next one from it."""
        folder = Path(path) / "checkpoints"
        steps = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
        return max(steps, default=0)

    def restore(self, state: Any, budget: int, resize_buffer: bool = False) -> Any:
        """``state`` from the latest checkpoint (the same structure, shapes and dtypes), or ``state`` itself if
        there is none; then opens the metrics log at that step. A checkpoint beyond ``budget`` (the run's total
        of ``step_key``) is refused. With ``resize_buffer``, a replay buffer saved at another capacity
        (``state["buffer"]``, with ``capacity``/``resized``: a run whose budget grew) is restored at its saved
        size and resized to this state's, keeping every episode."""
        try:
            self._check_free_space(state)
            return self._restore_latest(state, budget, resize_buffer)
        except BaseException:
            self.close()  # a run that cannot start does not keep its directory locked
            raise

    def _check_free_space(self, state: Any) -> None:
        """Refuse a run whose filesystem has room for fewer than two checkpoints of ``state`` (its arrays' bytes)."""
        size, free = _state_bytes(state), shutil.disk_usage(self.path).free
        if not _every_process(free >= 2 * size):  # all processes stop, or none: the restore is collective
            where = "its filesystem" if free < 2 * size else "the filesystem of another process of this run"
            raise RunDirectoryError(f"{self.path}: {_megabytes(free)} free on {where}, less than two "
                                    f"checkpoints of {_megabytes(size)} each (the run's state); free space or choose "
                                    "a run directory on another filesystem")

    def _restore_latest(self, state: Any, budget: int, resize_buffer: bool) -> Any:
        """The newest checkpoint that restores. Newer ones that do not are moved to :data:`DAMAGED_DIR` with a
        warning (never deleted); where none restores, the newest one's error is raised and nothing is moved."""
        step = self.latest_step
        if step is not None and step > budget:
            raise RunDirectoryError(f"{self.path} is already at {self.step_key} {step}, beyond this run's budget of "
                                    f"{budget}; pass a larger budget to continue it")
        failed: list[tuple[int, DamagedCheckpointError]] = []
        step = None
        for candidate in sorted(self.manager.all_steps(), reverse=True):
            try:
                restored = self._restore_step(candidate, state, resize_buffer)
            except DamagedCheckpointError as error:
                failed.append((candidate, error))
            else:
                state, step = restored, candidate
                break
        if failed and step is None:
            others = f", nor do the earlier ones (steps {', '.join(str(b) for b, _ in failed[1:])})" if failed[1:] else ""
            raise RunDirectoryError(f"{failed[0][1]}{others}. A checkpoint is damaged or was written by another "
                                    f"configuration: delete {self.path / 'checkpoints'} (or start afresh with "
                                    "overwrite) to start the run again from step 0")
        for bad, error in failed:
            if self.writer:
                aside = self._move_aside(bad)
                warnings.warn(f"{error}; moved to {aside} and resuming from the checkpoint at step {step}",
                              stacklevel=4)
        if failed:
            _sync("platonic_rl: damaged checkpoints moved aside")
            self.manager.reload()
        self.open_metrics(step or 0)
        return state

    def _restore_step(self, step: int, state: Any, resize_buffer: bool) -> Any:
        buffer = state.get("buffer") if resize_buffer and isinstance(state, dict) else None
        saved = self._saved_capacity(step) if buffer is not None else None
        if saved is None or saved == buffer.capacity:
            return self._restore(step, state)
        state = self._restore(step, {**state, "buffer": buffer.resized(saved)})
        try:
            state["buffer"] = state["buffer"].resized(buffer.capacity)
        except ValueError as error:
            raise RunDirectoryError(f"cannot resume {self.path}: its replay buffer does not fit this "
                                    f"config's capacity of {buffer.capacity} episodes ({error})") from None
        return state

    def _move_aside(self, step: int) -> Path:
        target = self.path / DAMAGED_DIR / str(step)
        n = 1
        while target.exists():
            n += 1
            target = self.path / DAMAGED_DIR / f"{step}-{n}"
        target.parent.mkdir(exist_ok=True)
        os.replace(self.path / "checkpoints" / str(step), target)
        return target

    def open_metrics(self, step: int) -> None:
        if not self.writer:  # the writer's rows up to ``step`` (those after it, it logs again)
            rows = MetricsLog.read(self.path) if (self.path / "metrics.jsonl").exists() else []
            self._rows = [r for r in rows if r.get(self.step_key, 0) <= step]
            return
        self.metrics = MetricsLog(self.path, step, self.step_key)
        if self.tensorboard:
            if not step:  # starting from step 0: events of an earlier start would mix with this one's
                shutil.rmtree(self.path / "tensorboard", ignore_errors=True)
            self._board = _TensorBoard(self.path / "tensorboard", purge_step=step + 1 if step else 0)

    def _restore(self, step: int, target: Any) -> Any:
        # Restored arrays are placed as the template's: a sharded or explicitly placed (committed) one keeps its
        # sharding; an array at the default placement (uncommitted, as every freshly made agent's is) is read into
        # host memory and placed by jnp.asarray, uncommitted again. Otherwise every restored leaf would come back
        # committed, and each jitted function (the update, the acting) would compile once more for it.
        def via_host(leaf) -> bool:  # typed PRNG keys have no NumPy dtype: orbax places those (committed)
            return (isinstance(leaf, jax.Array) and not leaf.committed
                    and not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key))

        abstract = jax.tree_util.tree_map(
            lambda leaf: np.empty(leaf.shape, leaf.dtype) if via_host(leaf) else ocp.utils.to_shape_dtype_struct(leaf),
            target)
        state = self._restore_as(step, abstract)
        return jax.tree_util.tree_map(lambda restored, leaf: jnp.asarray(restored) if via_host(leaf) else restored,
                                      state, target)

    def _restore_as(self, step: int, abstract: Any) -> Any:
        folder = self.path / "checkpoints" / str(step)
        try:
            with _absl_quiet():  # orbax logs every failed read of a damaged file at length
                return self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except Exception as error:  # orbax raises many types for missing, corrupt or mismatched files
            detail = str(error).splitlines()[0][:200] if str(error) else ""
            raise DamagedCheckpointError(f"checkpoint {folder} cannot be restored ({type(error).__name__}: "
                                         f"{detail})") from None

    def _saved_capacity(self, step: int) -> int | None:
        try:
            return int(self.manager.item_metadata(step)["buffer"]["observations"].shape[0])
        except Exception:  # noqa: BLE001 -- missing/corrupt metadata: let the restore explain
            return None

    def save(self, step: int, state: Any) -> None:
        """A checkpoint of ``state`` at ``step``. One that cannot be written (a full disk) raises
        :class:`RunWriteError` naming the step, the cause and the newest complete checkpoint; its partial folder
        is removed."""
        what = f"the checkpoint at {self.step_key} {step}"
        size, free = _state_bytes(state), shutil.disk_usage(self.path).free
        # Refused before orbax starts (a write that fails midway leaves its writer threads to print their errors as
        # the process exits), by every process or none: the save is collective.
        if not _every_process(free >= size):
            where = "" if free < size else " on another process of this run"
            raise self._write_error(what, cause=f"No space left on device (ENOSPC){where}: {_megabytes(free)} free, "
                                                f"the checkpoint needs up to {_megabytes(size)}")
        with _absl_quiet():  # orbax's writer threads log a failed write at length, many times
            try:
                self.manager.save(int(step), args=ocp.args.StandardSave(state))
            except Exception as error:  # orbax and tensorstore raise ValueError, OSError, ... around the OS error
                try:
                    self.manager.wait_until_finished()
                except Exception:  # noqa: BLE001 -- the same failure, reported below
                    pass
                if self.writer:
                    for partial in (self.path / "checkpoints").glob(f"{int(step)}.orbax-checkpoint-tmp*"):
                        shutil.rmtree(partial, ignore_errors=True)
                raise self._write_error(what, error) from None

    def _write_error(self, what: str, error: BaseException | None = None, cause: str | None = None
                     ) -> "RunWriteError":
        complete = self.saved_step(self.path)
        newest = f"step {complete} ({self.path / 'checkpoints' / str(complete)})" if complete else "none"
        cause = cause or _write_cause(error)
        return RunWriteError(f"{self.path}: could not write {what}: {cause}. The newest complete "
                             f"checkpoint is {newest}; free space (or move the run directory) and run the same command "
                             "again to resume from it")

    # ---------------------------------------------------------------------------------- metrics
    def log(self, row: dict) -> dict:
        """Append ``row`` (JSON-able scalars; must hold the step key) with ``row_seconds``, the wall-clock time
        since the previous row (or since the directory was opened). Returns the row as logged."""
        now = time.time()
        row = {**row, "row_seconds": now - self._last_row_time}
        self._last_row_time = now
        if not self.writer:
            self._rows.append(row)
            return row
        if self.metrics is None:
            self.open_metrics(0)
        try:
            self.metrics.append(row)
        except OSError as error:
            raise self._write_error(f"the metrics row at {self.step_key} {row.get(self.step_key)}", error) from None
        if self._board is not None:
            self._board.add(row, int(row[self.step_key]))
        return row

    @property
    def rows(self) -> list[dict]:
        if not self.writer:
            return list(self._rows)
        return list(self.metrics.rows) if self.metrics else []

    def close(self) -> None:
        """Finish writing and release the directory's lock (closing twice does nothing more)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.manager.wait_until_finished()
            self.manager.close()
            if self._board is not None:
                self._board.close()
                self._board = None
        finally:
            if self._lock is not None:
                _release(self.path, self._lock)
                self._lock = None

    def __enter__(self) -> "RunDirectory":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _process_zero_says(yes: bool) -> bool:
    """Process 0's ``yes``, in every process of a multi-process run (a collective: all of them call it)."""
    from jax.experimental import multihost_utils

    return bool(multihost_utils.broadcast_one_to_all(np.int32(yes)))


def _every_process(yes: bool) -> bool:
    """Whether ``yes`` holds in every process of a multi-process run (a collective: all of them call it)."""
    if jax.process_count() == 1:
        return yes
    from jax.experimental import multihost_utils

    return bool(np.min(multihost_utils.process_allgather(np.int32(yes))))


def _sync(name: str) -> None:
    """Every process of a multi-process run waits here for the others (nothing for one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _release(path: Path, lock: "FileLock | FlockLock") -> None:
    """Forget this process as ``path``'s holder, then release the lock (its file stays: removing a lock file
    while another process waits on it would let two processes hold it)."""
    try:
        (path / HOLDER_FILE).unlink(missing_ok=True)
    finally:
        lock.release(force=True)


def agent_settings(agent: Any) -> dict:
    """The part of a run's settings that says which agent trains: its class and its config."""
    return dict(agent=type(agent).__name__, agent_config=agent.config)  # a dataclass: as_json converts it
