"""How every benchmark ends a run: ``results.json`` with the exact command and config, the plots, the printed table.

    record = report.save_run(out, "platonic_rl.benchmarks.mountaincar", args, dict(results=...), table,
                             plots={"values.png": lambda path: plot_values(path, ...)}, total_seconds=...)

``results.json`` holds ``command`` (the shell command that reruns the run), ``commit`` (the suite's git commit,
``+modified`` when tracked files differ from it; None outside a git checkout), ``args`` (the CLI arguments,
``dataclasses.asdict``), the benchmark's own record, ``table`` (the printed text), ``jax_backend`` and
``jax_devices``, and ``total_seconds`` when given. :func:`resave_run` rewrites an earlier run's record (e.g. with
a reference curve added later) and keeps what describes that run: its command, args, devices and seconds.

A benchmark that fills a long table over several calls keeps each finished piece (a row, an evaluation) as a record of
its own, reused by the next call: :func:`cached_record` (and :func:`write_record`, :func:`read_record`).
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RUN_KEYS = ("command", "commit", "args", "table", "jax_backend", "jax_devices", "total_seconds")
"""The keys :func:`save_run` writes itself; a benchmark's record must not hold them."""


def command(module_name: str, argv: Sequence[str] | None = None) -> str:
    """``python -m <module_name> <argv>`` with every argument shell-quoted; ``argv`` defaults to this process's
    arguments (``sys.argv[1:]``), so that the string reruns the current command."""
    argv = sys.argv[1:] if argv is None else argv
    return " ".join(shlex.quote(str(a)) for a in ["python", "-m", module_name, *argv])


def source_commit() -> str | None:
    """The git commit of the suite's source (``+modified`` appended when tracked files differ from it), or None when
    the suite is not the top of a git checkout (an installed wheel, or a copy inside another repository), git is
    missing or refuses the directory."""
    root = Path(__file__).resolve().parents[1]
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        if not top or Path(top).resolve() != root:  # the suite installed inside some other repository
            return None
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+modified" if changed else "") if head else None


def save_run(out_dir: str | Path, module_name: str, args, record: Mapping[str, Any], table: str,
             plots: Mapping[str, Callable[[Path], Any]] | None = None, total_seconds: float | None = None) -> dict:
    """Save a finished run in ``out_dir``: print ``table``, write ``results.json`` (the command, ``args`` as a
    dict, ``record``, the table, the JAX backend and devices, ``total_seconds`` if given), then draw each plot
    -- ``plots`` maps a file name in ``out_dir`` to a function called with its path -- and print the files saved.
    Returns the record as saved (a new dict; ``record`` is not changed)."""
    import jax

    clash = sorted(set(record) & set(RUN_KEYS))
    if clash:
        raise ValueError(f"save_run: the record must not hold {clash}; save_run writes them itself")
    saved = dict(command=command(module_name), commit=source_commit(), args=dataclasses.asdict(args), **record,
                 table=table, jax_backend=jax.default_backend(), jax_devices=[str(d) for d in jax.devices()])
    if total_seconds is not None:
        saved["total_seconds"] = total_seconds
    return _write(Path(out_dir), saved, plots)


def resave_run(out_dir: str | Path, module_name: str, record: Mapping[str, Any], table: str,
               plots: Mapping[str, Callable[[Path], Any]] | None = None,
               command_key: str = "reference_command") -> dict:
    """Like :func:`save_run` for a record loaded from an earlier run's ``results.json`` and updated: it keeps its
    command, args, devices and seconds (they describe the run), gets the new ``table`` and this process's
    command under ``command_key``, and the plots are redrawn. Returns the record as saved."""
    if command_key in RUN_KEYS:
        raise ValueError(f"resave_run: command_key {command_key!r} would overwrite the run's own {command_key!r}")
    saved = {**record, "table": table, command_key: command(module_name)}
    return _write(Path(out_dir), saved, plots)


def _write(out: Path, saved: dict, plots: Mapping[str, Callable[[Path], Any]] | None) -> dict:
    print(saved["table"])
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json"]
    # results.json first: a plot that fails must not lose the results of a long run.
    paths[0].write_text(json.dumps(saved, indent=1, default=plain))
    for name, draw in (plots or {}).items():
        draw(out / name)
        paths.append(out / name)
    print("saved " + ", ".join(str(p) for p in paths))
    return saved


def suptitle(fig, title: str, fontsize: float = 12) -> None:
    """``fig``'s title, each of its lines wrapped to the figure's width (about 0.55 em per character), so a long
    budget line is never cut off at the figure's edges."""
    width = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))  # characters that fit across the figure
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=fontsize)


def plain(value):
    """NumPy and JAX scalars and arrays as Python numbers and lists, other numbers as floats (``json.dumps``'s
    ``default``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"results.json: {type(value).__name__} is not JSON serialisable: {value!r}") from None


def write_record(path: str | Path, record: Mapping[str, Any], indent: int | None = 1) -> dict:
    """``record`` saved as JSON at ``path`` (NumPy and JAX values as numbers and lists: :func:`plain`); returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=indent, default=plain))
    return dict(record)


def read_record(path: str | Path) -> dict | None:
    """The record saved at ``path`` (:func:`write_record`), or None where there is none."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else None


def cached_record(path: str | Path, compute: Callable[[], Mapping[str, Any]], *,
                  current: Callable[[dict], bool] = lambda record: True, overwrite: bool = False,
                  indent: int | None = 1) -> dict:
    """A benchmark's stored result, reused when the command is run again: the record at ``path`` where one is saved,
    ``current(record)`` says it was made with this call's settings and ``overwrite`` is off; else ``compute()``'s,
    saved at ``path`` (over one made with other settings) and returned.

        record = report.cached_record(out / "evals" / f"{name}.json", lambda: evaluate(...),
                                      current=lambda r: r["updates"] == updates, overwrite=args.overwrite)"""
    saved = None if overwrite else read_record(path)
    if saved is not None and current(saved):
        return saved
    return write_record(path, compute(), indent)


def finished_run(path: str | Path, settings: Mapping[str, Any], train: Callable[[], Mapping[str, Any]], *,
                 overwrite: bool = False, ignore: Sequence[str] = (),
                 checked: Callable[[dict], dict] = lambda record: {}, elsewhere: str = "--out-dir") -> dict:
    """The record of a run that trains (at ``path``, beside its run directory): reused where it was saved with
    ``settings`` (compared field by field, the names in ``ignore`` aside, with ``checked(record)``'s further
    ``{name: (recorded, asked)}`` differences); refused, the differences named, where it was saved with others
    (unlike :func:`cached_record`, which makes such a record again: retraining a finished run is asked for with
    ``overwrite``); else ``train()``'s record, saved with ``settings`` under ``"settings"``.

        record = report.finished_run(run_dir / "record.json", dict(agent=config, seeds=[0, 1]), lambda: train(...),
                                     overwrite=args.overwrite)"""
    from platonic_rl.common.records import as_json, describe_differences, settings_differences

    path = Path(path)

    def current(record: dict) -> bool:
        differ = {**settings_differences(record.get("settings", {}), settings, ignore=tuple(ignore)),
                  **checked(record)}
        if differ:
            raise ValueError(f"{path} holds a finished run with other settings than this call's:\n"
                             f"{describe_differences(differ)}\npass --overwrite to train it again, or choose another "
                             f"{elsewhere}")
        print(f"{path.parent.name}: finished in {path.parent}, its record reused", flush=True)
        return True

    return cached_record(path, lambda: {**train(), "settings": as_json(settings)}, current=current,
                         overwrite=overwrite)
