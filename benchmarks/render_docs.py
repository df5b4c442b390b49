"""Docs rendered from the records: the tables between markers in the suite's markdown pages, rebuilt from the
``results.json`` files (and the status lines) they name, so that a number is typed once, by the run that measured it.

    python3 -m platonic_rl.benchmarks.render_docs           # rewrite every marked table in place
    python3 -m platonic_rl.benchmarks.render_docs --check   # exit 1 naming each table that differs (the suite's test)

A marked table in a page::

    <!-- rendered: ogbench_success results/ogbench_cpu/results.json results/ogbench_gcivl_hiql/results.json -->
    | dataset | ... |
    <!-- /rendered -->

The first word names a renderer of :data:`RENDERERS`; the rest are its arguments: paths of records, relative to the
page, then ``key=value`` options. Everything between the two markers is the renderer's, rewritten on every run; what
a page says around it is the page's. A renderer reads records only (never runs anything), so rendering is quick and
needs no trained runs.

The renderers:

- ``statuses``: the status column of a table whose rows link to sections of ``docs/results.md`` (its overview table and
  the README's results table), from each section's ``**Status: ...**`` lines (written once, under the section's claim).
- ``status_counts``: the README's sentence counting the results page's statuses (a section's first claim counts).
- ``ogbench_success``: OGBench's point mazes, success (%) per dataset and method, mean ± std over seeds, the best
  learned method in bold, the straight line and OGBench's published numbers beside them, from
  :mod:`~platonic_rl.benchmarks.ogbench`'s records; the records and their commits under the table.
- ``ogbench_tasks``: the same records task by task (mean over seeds, their range where they differ).
- ``ogbench_time``: minutes from raw data to a row's score (generation, training, evaluation) and the machine's
  matmul peak, from the same records.
- ``speed_compiled``: the speed report's updates, XLA step by step: products against the rest.
- ``maze2d_scores``: maze2d's D4RL-normalised scores per layout, the fraction of episodes at the goal at their end and
  the time per action, one row per line of the marker (``LABEL | METHOD | FOLDER... [| GROUP]``: the row's label, the
  method's ``evals/<layout>-<METHOD>.json`` looked up in the folders in order, ``paper:METHOD`` for the published
  numbers; the best of each group in bold), from :mod:`~platonic_rl.benchmarks.maze2d`'s records.

A marker's first line holds the renderer, records and options; a renderer that takes rows reads the marker's further
lines, and the marker then ends with ``-->`` on a line of its own.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from platonic_rl.common.records import read_json

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root (the package's own directory: the suite is laid out flat)."""

MARKER = re.compile(r"^<!-- rendered: (?P<spec>[^>]*?)\s+-->\n(?P<body>.*?)^<!-- /rendered -->$", re.M | re.S)


class RenderError(ValueError):
    """A marker that cannot be rendered: an unknown renderer, a missing record, a bad option."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One marked table: the page, its renderer's name, record paths (resolved), options and the current text."""
    page: Path
    renderer: str
    records: tuple[Path, ...]
    options: dict
    body: str
    rows: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)  # the marker's lines after its first
    start: int
    end: int
    text: str = dataclasses.field(repr=False, default="")  # the whole page's text


def pages(root: Path = ROOT) -> list[Path]:
    """Every markdown page of the suite: the README and ``docs/`` (studies included)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The marked tables of ``page`` (of ``text`` given as its content), in order."""
    text = page.read_text() if text is None else text
    found = []
    for match in MARKER.finditer(text):
        first, *rows = match["spec"].split("\n")
        words = first.split()
        if not words:
            raise RenderError(f"{page}: a rendered marker names no renderer")
        records = tuple((page.parent / w).resolve() for w in words[1:] if "=" not in w)
        options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        found.append(Block(page, words[0], records, options, match["body"], match.start("body"), match.end("body"),
                           text, rows=tuple(r.strip() for r in rows if r.strip())))
    return found


def _read(path: Path) -> dict:
    if not path.is_file():
        raise RenderError(f"record {path} does not exist")
    return read_json(path, "a benchmark's results record")


def _link(page: Path, path: Path) -> str:
    """``path`` relative to ``page``'s folder, as a markdown link target."""
    return Path(os.path.relpath(path, page.parent)).as_posix()


# ------------------------------------------------------------------------------------------------ statuses

STATUS = re.compile(r"\*\*Status: (?P<status>[^*]+)\*\*")


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lower case, punctuation dropped, spaces as hyphens."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


RESULTS = ROOT / "docs" / "results.md"


def section_statuses(text: str) -> dict[str, str]:
    """``{anchor: status}`` for every ``## `` section of the results page's ``text`` holding ``**Status: ...**`` lines: the
    statuses in the section's order joined by ``; `` (a section with two claims has two)."""
    statuses, anchor = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            anchor = heading_anchor(line[3:])
        elif anchor is not None:
            found = STATUS.findall(line)
            if found:
                statuses[anchor] = "; ".join(filter(None, [statuses.get(anchor), *(s.strip() for s in found)]))
    return statuses


def results_page(page: Path) -> Path:
    """The results page of the suite ``page`` belongs to: ``page`` itself, or ``docs/results.md`` beside it or in a
    folder above it (the README's: the root's), so that a copy of the suite renders from its own results."""
    page = page.resolve()
    if page.name == "results.md" and page.parent.name == "docs":
        return page
    for folder in (page.parent, *page.parents):
        if (folder / "docs" / "results.md").is_file():
            return folder / "docs" / "results.md"
    raise RenderError(f"{page}: no docs/results.md beside it or above it to read the statuses from")


def _statuses_for(block: Block) -> dict[str, str]:
    """The results page's statuses, read from the block's own text when the block is on that page."""
    results = results_page(block.page)
    return section_statuses(block.text if block.page.resolve() == results else results.read_text())


def render_statuses(block: Block) -> str:
    """The block's table with its last column set to the status of the results section its row links to."""
    statuses = _statuses_for(block)
    lines = block.body.rstrip("\n").split("\n")
    out = []
    for line in lines:
        cells = line.split(" | ")
        anchors = re.findall(r"\]\((?:[\w./]*results\.md)?#([\w-]+)\)", line)
        if len(cells) < 2 or not anchors or line.startswith("|---"):
            out.append(line)
            continue
        if anchors[0] not in statuses:
            raise RenderError(f"{block.page}: the row linking to #{anchors[0]} has no section with a status in "
                              f"{results_page(block.page)}")
        out.append(" | ".join(cells[:-1]) + f" | {statuses[anchors[0]]} |")
    return "\n".join(out) + "\n"


def render_status_counts(block: Block) -> str:
    """One sentence: how many sections of ``docs/results.md`` meet, partly meet, miss or cannot compare with their
    (first) claim."""
    statuses = _statuses_for(block)
    first = [s.split(";")[0].split()[0] if not s.startswith("not comparable") else "not comparable"
             for s in statuses.values()]
    unknown = sorted(set(first) - {"met", "partial", "missed", "not comparable"})
    if unknown:
        raise RenderError(f"docs/results.md: statuses {unknown} are none of met, partial, missed, not comparable")
    return (f"Measured on 2 CPU cores at 1/50 to 1/200 of the published samples, {first.count('met')} of the "
            f"{len(first)} benchmarks meet the claim they test, {first.count('partial')} partly, "
            f"{first.count('missed')} miss it and {first.count('not comparable')} is not comparable "
            f"([Results](#results)).\n")


# ------------------------------------------------------------------------------------------------ OGBench

def _record_and_methods(path: Path) -> tuple[Path, dict, set[str] | None]:
    """A record path of the marker, ``results.json`` or ``results.json:m1,m2`` (only those methods taken from it)."""
    name, _, wanted = path.name.partition(":")
    return path.with_name(name), _read(path.with_name(name)), set(wanted.split(",")) if wanted else None


def _records_line(page: Path, records: Sequence[tuple[Path, dict]], commits: bool = True) -> str:
    """The line under a table naming its records: each one's folder linked to its ``results.json``, and its commit."""
    return "Records: " + ", ".join(
        f"[{_link(page, path.parent)}]({_link(page, path)})"
        + (f" (commit {short_commit(record.get('commit'))})" if commits else "") for path, record in records)


def _thousands(updates: int) -> str:
    return f"{updates // 1000}k" if updates % 1000 == 0 else f"{updates:,}"


def render_ogbench_success(block: Block) -> str:
    """OGBench's success table from the benchmark's records: one row per dataset (the records' order), one column
    per method (the records' order, first record first; ``methods=a,b`` to choose and order them; a record given as
    ``results.json:a,b`` gives only those methods), the best learned mean of each row in bold, the straight line,
    OGBench's published numbers (``paper=no`` leaves them out). Each column's header names its usual budget (updates)
    and a cell at another budget names its own. Under the table, each record's link and commit."""
    from platonic_rl.benchmarks.ogbench import ROWS
    from platonic_rl.benchmarks.ogbench import published as published_text

    if not block.records:
        raise RenderError(f"{block.page}: ogbench_success needs at least one record")
    records = [_record_and_methods(path) for path in block.records]
    datasets: list[str] = []
    for _, record, _ in records:
        datasets += [d for d in record["results"] if d not in datasets]
    methods: list[str] = []
    cell: dict[tuple[str, str], tuple[float, float, int | None]] = {}
    for _, record, wanted in records:  # a later record's run of the same (dataset, method) replaces an earlier one's
        for d, by_method in record["results"].items():
            for m, entry in by_method.items():
                if wanted is None or m in wanted:
                    methods += [m] if m not in methods else []
                    cell[d, m] = float(entry["mean"]), float(entry["std"]), entry.get("updates")
    if "methods" in block.options:
        wanted = block.options["methods"].split(",")
        unknown = [m for m in wanted if m not in methods]
        if unknown:
            raise RenderError(f"{block.page}: methods={','.join(unknown)} are in none of the records")
        methods = wanted
    budget = {}  # each column's most common budget
    for m in methods:
        budgets = [cell[d, m][2] for d in datasets if (d, m) in cell and cell[d, m][2] is not None]
        budget[m] = max(budgets, key=budgets.count) if budgets else None
    straight = {}  # the first record's (the main table's episodes per task)
    for _, r, _ in records:
        for d, line in r.get("straight_line", {}).items():
            straight.setdefault(d, line["success"])
    paper = {d: p for _, r, _ in records for d, p in r.get("paper", {}).items()}
    show_paper = block.options.get("paper", "yes") != "no"
    published = [m for m in methods if any(m in paper.get(d, {}) for d in datasets)] if show_paper else []

    header = ["dataset", *(ROWS[m].label + (f", {_thousands(budget[m])}" if budget[m] else "") for m in methods),
              "straight line"]
    if published:
        header.append("OGBench: " + " / ".join(ROWS[m].label.split(" (")[0] for m in published))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for d in datasets:
        best = max((cell[d, m][0] for m in methods if (d, m) in cell), default=None)
        row = [d]
        for m in methods:
            if (d, m) not in cell:
                row.append("–")
                continue
            mean, std, updates = cell[d, m]
            text = f"{mean:.1f} ± {std:.1f}"
            text = f"**{text}**" if mean == best else text
            row.append(text + (f" ({_thousands(updates)})" if updates is not None and updates != budget[m] else ""))
        row.append(f"{straight[d]:.1f}" if d in straight else "–")
        if published:
            row.append(" / ".join(published_text(paper[d][m]) if m in paper.get(d, {}) else "–"
                                  for m in published))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", _records_line(block.page, [(path, record) for path, record, _ in records])]
    return "\n".join(lines) + "\n"


def short_commit(commit: str | None) -> str:
    """A record's commit as a reader needs it: 7 hex digits, ``+modified`` kept; "not recorded" for older runs."""
    if not commit:
        return "not recorded"
    return commit.split("+")[0][:7] + ("+modified" if commit.endswith("+modified") else "")


def render_ogbench_tasks(block: Block) -> str:
    """OGBench's success per evaluation task (%, mean over seeds; the seeds' range where they differ) for every
    (dataset, method) of the records (``methods=a,b`` to choose them), with the straight line's per task."""
    from platonic_rl.benchmarks.ogbench import ROWS

    if not block.records:
        raise RenderError(f"{block.page}: ogbench_tasks needs at least one record")
    wanted = block.options["methods"].split(",") if "methods" in block.options else None
    lines = ["| dataset | method | task 1 | task 2 | task 3 | task 4 | task 5 | overall |",
             "|---|---|---|---|---|---|---|---|"]
    records = [(path, _read(path)) for path in block.records]
    for _, record in records:
        for dataset, by_method in record["results"].items():
            for method, entry in by_method.items():
                if wanted is not None and method not in wanted:
                    continue
                per_task = [[seed["task_success"][t] for seed in entry["per_seed"]] for t in range(5)]
                cells = [f"{_mean(v):.0f}" + (f" ({min(v):.0f}-{max(v):.0f})" if max(v) != min(v) else "")
                         for v in per_task]
                lines.append(f"| {dataset} | {ROWS[method].label} | " + " | ".join(cells)
                             + f" | {entry['mean']:.1f} |")
            straight = record.get("straight_line", {}).get(dataset)
            if straight is not None and (wanted is None or "straight_line" in wanted):
                lines.append(f"| {dataset} | straight line | "
                             + " | ".join(f"{t:.0f}" for t in straight["task_success"]) + f" | {straight['success']:.1f} |")
    lines += ["", _records_line(block.page, records, commits=False)]
    return "\n".join(lines) + "\n"


def render_ogbench_time(block: Block) -> str:
    """The time a row takes on the machine that ran it, from raw data to the table's score: per dataset its generation
    (where the record kept it) and per (dataset, method) the training of its seeds (the trained method's, shared by
    the rows that act with it), its evaluation and the float32 matmul peak measured before the training (where the
    record kept it); ``methods=a,b`` to choose them. Minutes, one decimal."""
    from platonic_rl.benchmarks.ogbench import ROWS

    if not block.records:
        raise RenderError(f"{block.page}: ogbench_time needs at least one record")
    wanted = block.options["methods"].split(",") if "methods" in block.options else None
    minutes = lambda seconds: "–" if seconds is None else f"{seconds / 60:.1f}"  # noqa: E731
    lines = ["| dataset | method | updates x seeds | dataset generated (min) | training (min) | evaluation (min) | "
             "total (min) | float32 matmul GFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    records = [_record_and_methods(path) for path in block.records]
    for _, record, chosen in records:
        for dataset, by_method in record["results"].items():
            generated = record.get("datasets", {}).get(dataset, {}).get("generation_seconds")
            for method, entry in by_method.items():
                if (wanted is not None and method not in wanted) or (chosen is not None and method not in chosen):
                    continue
                train, evaluate = entry.get("signals", {}).get("wall_time", entry["train_seconds"]), entry["eval_seconds"]
                total = None if generated is None else generated + train + evaluate
                peak = entry.get("matmul_peak_gflops")
                lines.append(f"| {dataset} | {ROWS[method].label} | {_thousands(entry['updates'])} x "
                             f"{len(entry['per_seed'])} | {minutes(generated)} | {minutes(train)} | "
                             f"{minutes(evaluate)} | {minutes(total)} | {'–' if peak is None else f'{peak:.0f}'} |")
    lines += ["", _records_line(block.page, [(path, record) for path, record, _ in records], commits=False)]
    return "\n".join(lines) + "\n"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _mean_std(values: Sequence[float], digits: int = 2) -> str:
    """``mean ± std`` at ``digits`` decimals, the std over the values themselves (seeds; not a sample's)."""
    mean = _mean(values)
    return f"{mean:.{digits}f} ± {(sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5:.{digits}f}"


def _mean_and_range(values: Sequence[float]) -> str:
    """``mean [min-max]``, one decimal."""
    return f"{_mean(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def render_ogbench_teleport(block: Block) -> str:
    """The teleport maze's diagnosis (``benchmarks.ogbench_teleport``): per policy and task the success, the episodes
    that passed through a teleporter and those that ended in the walled-in cell (%, mean over seeds), then the
    learned cost from each inbound teleporter to each exit (mean over seeds, their range)."""
    from platonic_rl.benchmarks.ogbench import ROWS

    if len(block.records) != 1:
        raise RenderError(f"{block.page}: ogbench_teleport needs one record (ogbench_teleport's results.json)")
    record = _read(block.records[0])
    seeds = record["per_seed"]
    share = lambda rows, key: 100.0 * sum(r[key] for r in rows) / len(rows)  # noqa: E731
    lines = ["| policy | | task 1 | task 2 | task 3 | task 4 | task 5 | all tasks |", "|---|---|---|---|---|---|---|---|"]
    for method in seeds[0]["episodes"]:
        for key, what in (("success", "success"), ("teleported", "through a teleporter"),
                          ("trapped", "ended walled in")):
            per_task = [share([s["episodes"][method][t] for s in seeds], key) for t in range(5)]
            lines.append(f"| {ROWS[method].label if what == 'success' else ''} | {what} | "
                         + " | ".join(f"{v:.0f}" for v in per_task) + f" | {sum(per_task) / 5:.1f} |")
    walled = record["teleporters"]["walled_in"]
    exits = [f"exit {i + 1} {tuple(cell)}" + (" (walled in)" if walled[i] else "")
             for i, cell in enumerate(record["teleporters"]["outbound_cells"])]
    lines += ["", "| learned cost d(in, exit), mean [seeds' range] | " + " | ".join(exits) + " |",
              "|---|" + "---|" * len(exits)]
    for i in range(len(record["teleporters"]["inbound"])):
        lines.append(f"| inbound teleporter {i + 1} | " + " | ".join(
            _mean_and_range([s["learned"]["in_to_out"][i][k] for s in seeds]) for k in range(len(exits))) + " |")
    if "walk_cells" in record:
        learned = [[s["learned"]["start_to_goal"][t] for s in seeds] for t in range(5)]
        lines += ["", "| from start to goal | task 1 | task 2 | task 3 | task 4 | task 5 |", "|---|---|---|---|---|---|",
                  "| the maze's walk, no teleporter entered (cells) | "
                  + " | ".join(str(c) for c in record["walk_cells"]) + " |",
                  "| learned d(start, goal), mean [seeds' range] | "
                  + " | ".join(_mean_and_range(v) for v in learned) + " |"]
    lines += ["", _records_line(block.page, [(block.records[0], record)])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ device loop

def _final(success) -> list[float]:
    """Per seed: the mean success of the last evaluations (``benchmarks.device_loop.final_success``)."""
    from platonic_rl.benchmarks.device_loop import final_success

    return [float(v) for v in final_success(dict(success=success))]


def render_device_loop_learning(block: Block) -> str:
    """The device loop's learning table: per env (the marker's lines, ``LABEL | ENV``) the success of QRL, Contrastive
    RL and GCBC (per seed the mean of its last evaluations, mean ± std over seeds) from the first record, QRL's graph
    waypoints over its replay buffer from the second (``graph_waypoints``) and, at rest after a stall, from the third
    (``graph_waypoints_rest``, with that run's own agent), and QRL's critic check (the actor / the critic alone) from
    the first."""
    if len(block.records) != 3:
        raise RenderError(f"{block.page}: device_loop_learning needs three records: the learning run, the graph "
                          f"waypoints' run and the runs with targets at rest")
    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if not rows or any(len(r) != 2 or not all(r) for r in rows):
        raise RenderError(f"{block.page}: device_loop_learning needs rows 'LABEL | ENV', one per line")
    records = [(path, _read(path)) for path in block.records]
    (_, learning), (_, waypoints), (_, rest) = records
    lines = ["| env | QRL | QRL's graph waypoints over its replay buffer | Contrastive RL | GCBC | QRL check: actor / "
             "critic alone |", "|---|---|---|---|---|---|"]
    runs = learning["learning"]
    for label, env in rows:
        cell = lambda method: _mean_std(_final(runs[f"{env}/{method}"]["success"])) if f"{env}/{method}" in runs \
            else ""  # noqa: E731
        graph = waypoints["learning"].get(f"{env}/qrl")
        at_rest = rest["learning"].get(f"{env}/qrl")
        policy = ""
        if graph is not None and at_rest is not None:
            seeds = len(at_rest["success"][0])
            policy = (f"{_mean_std(_final(graph['policy_success']['graph_waypoints']))}; at rest "
                      f"{_mean_std(_final(at_rest['policy_success']['graph_waypoints_rest']))} (its agent: "
                      f"{_mean_std(_final(at_rest['success']))}, {seeds} seeds)")
        check = runs.get(f"{env}/qrl", {}).get("critic_check")
        checked = "" if check is None else f"{_mean(check['actor']):.2f} / {_mean(check['critic_alone']):.2f}"
        lines.append(f"| {label} | {cell('qrl')} | {policy} | {cell('crl')} | {cell('gcbc')} | {checked} |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ quasimetric learning

def _three_figures(value: float | None) -> str:
    """A positive error or prediction to about three figures: 1.08, 24.2, 547, 2.7e4; inf; "-" for none."""
    if value is None:
        return "-"
    if value == float("inf"):
        return "inf"
    if value >= 1e4:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def render_quasimetric_large(block: Block) -> str:
    """Table 3.2's columns on the larger graph: test MSE x 1e-3 / l1 error on finite distances / mean prediction on
    unreachable pairs, one column per record (its steps), then the paper's. Per marker line ``LABEL | METHODS |
    FAMILY``: the method of ``METHODS`` (space-separated) with the lowest test MSE in each record ("–" where none
    ran), and the paper's row ``FAMILY``; bold: each column's lowest MSE."""
    from platonic_rl.benchmarks.quasimetric_learning import PAPER_TABLE_3_2

    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if not block.records or not rows or any(len(r) != 3 or not all(r) for r in rows):
        raise RenderError(f"{block.page}: quasimetric_large needs records and rows 'LABEL | METHODS | FAMILY', one "
                          f"per line")
    records = [(path, _read(path)) for path in block.records]
    cells = lambda r: " / ".join(_three_figures(v) for v in (1e3 * r["test_mse"], r["l1_finite"],  # noqa: E731
                                                               r["pred_infinite"]))
    chosen = []  # per row, per record: the chosen result or None
    for label, methods, family in rows:
        if family not in PAPER_TABLE_3_2:
            raise RenderError(f"{block.page}: quasimetric_large: no paper row {family!r}; known: "
                              f"{sorted(PAPER_TABLE_3_2)}")
        results = []
        for _, record in records:
            ran = [record["large"]["results"][m] for m in methods.split() if m in record["large"]["results"]]
            results.append(min(ran, key=lambda r: r["test_mse"]) if ran else None)
        chosen.append(results)
    best = [min((row[i]["test_mse"] for row in chosen if row[i] is not None), default=None)
            for i in range(len(records))]
    lines = ["| head | " + " | ".join(f"{record['scale']['large_steps']} steps" for _, record in records)
             + " | paper |", "|---" * (len(records) + 2) + "|"]
    for (label, _, family), results in zip(rows, chosen):
        row = ["–" if r is None else f"**{cells(r)}**" if r["test_mse"] == best[i] else cells(r)
               for i, r in enumerate(results)]
        paper = " / ".join(_three_figures(v) for v in PAPER_TABLE_3_2[family])
        lines.append(f"| {label} | " + " | ".join(row) + f" | {paper} |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ representations

ENCODER_FAMILIES = {"align_uniform": "align+uniform, w={:g}", "infonce": "InfoNCE, tau={:g}", "untrained": "untrained",
                    "pixels": "raw pixels"}


def render_representations(block: Block) -> str:
    """The digits encoders' table: per (family, setting), in the record's order, the linear probe's accuracy (mean ±
    std over seeds; one value where one encoder ran) and the mean L_align and L_uniform; bold: the best setting of
    each self-supervised family (the record's summary); "(collapsed)" where L_uniform is above -0.01 (every
    embedding on one point)."""
    if len(block.records) != 1:
        raise RenderError(f"{block.page}: representations needs the one representations record")
    record = _read(block.records[0])
    groups: dict[tuple, list[dict]] = {}
    for encoder in record["encoders"]:
        groups.setdefault((encoder["family"], encoder["param"]), []).append(encoder)
    best = {(family, record["summary"][f"best_{family}"]["param"]) for family in ("align_uniform", "infonce")
            if f"best_{family}" in record["summary"]}
    lines = ["| encoder | probe accuracy | L_align | L_uniform |", "|---|---|---|---|"]
    for (family, param), encoders in groups.items():
        label = ENCODER_FAMILIES.get(family, family).format(param)
        accuracy = [e["accuracy"] for e in encoders]
        cell = _mean_std(accuracy, 3) if len(encoders) > 1 else f"{_mean(accuracy):.3f}"
        if (family, param) in best:
            label, cell = f"**{label}**", f"**{cell}**"
        uniform = _mean([e["uniform"] for e in encoders])
        lines.append(f"| {label} | {cell} | {_mean([e['align'] for e in encoders]):.3f} | {uniform:.3f}"
                     + (" (collapsed)" if uniform > -0.01 else "") + " |")
    lines += ["", _records_line(block.page, [(block.records[0], record)])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ convergence

def render_convergence(block: Block) -> str:
    """The convergence table: per maze, view and method the final snapshot's readings (success; mutual k-NN within
    the method across seeds, with the other methods, with the maze's geodesic; linear CKA with the geodesic and the
    position), means over seeds, in brackets the same networks untrained (``benchmarks.convergence``)."""
    from platonic_rl.benchmarks.convergence import NAMES, method_readings

    if len(block.records) != 1:
        raise RenderError(f"{block.page}: convergence needs the one convergence record")
    record = _read(block.records[0])
    last = record["scale"]["snapshots"][-1]
    columns = ("success", "within", "across", "knn/geodesic", "cka/geodesic", "cka/position")
    lines = ["| maze | view | method | success | within | across | kNN geodesic | CKA geodesic | CKA position |",
             "|---|---|---|---|---|---|---|---|---|"]
    for maze, views in record["envs"].items():
        for view_name, view in views.items():
            for method in view["summary"]["methods"]:
                final, untrained = (method_readings(view, method, snapshot) for snapshot in (last, 0))
                digits = lambda name: 2 if name == "success" else 3  # noqa: E731
                cells = [f"{final[c]:.{digits(c)}f} ({untrained[c]:.{digits(c)}f})" for c in columns]
                lines.append(f"| {maze} | {view_name} | {NAMES[method]} | " + " | ".join(cells) + " |")
    lines += ["", _records_line(block.page, [(block.records[0], record)])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ mountaincar

def render_mountaincar_scores(block: Block) -> str:
    """Table 4.1 from the MountainCar record: per method (the record's order) the score on the top of the hill and on
    the 9 states beside the paper's, and the Spearman correlations of the learned distance with the true cost."""
    from platonic_rl.benchmarks.mountaincar import LABELS

    if len(block.records) != 1:
        raise RenderError(f"{block.page}: mountaincar_scores needs the one MountainCar record")
    record = _read(block.records[0])
    number = lambda v, digits=2: "–" if v is None else "" if v != v else f"{v:.{digits}f}"  # noqa: E731  (NaN: "")
    lines = ["| method | top of hill | (paper) | 9 states | (paper) | Spearman top | Spearman 9 (mean) |",
             "|---|---|---|---|---|---|---|"]
    for name, result in record["results"].items():
        summary, paper = result["summary"], record["paper_table_4_1"].get(name, [None, None])
        nine_rho = summary.get("spearman_nine_states_mean", float("nan"))
        lines.append(f"| {LABELS.get(name, name)} | {number(summary['top_of_hill'])} | {number(paper[0])} | "
                     f"{number(summary['nine_states'])} | {number(paper[1])} | "
                     f"{number(summary.get('spearman_top_of_hill', float('nan')), 3)} | "
                     f"{'–' if summary['nine_states'] is None else number(nine_rho, 3)} |")
    lines += ["", _records_line(block.page, [(block.records[0], record)])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ own dataset

def _small(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2f}"


def render_own_dataset(block: Block) -> str:
    """The own-dataset table: the first record's methods (marker lines ``LABEL | METHOD``: success at each budget,
    mean ± std over seeds, bold where one method leads; seed 0's seconds at the last budget; the BC NLL and the
    constraint's violation at the last budget, means over seeds and critics) and the second record's policies (lines
    ``LABEL | NAME / NAME``: a method's own acting or a ``make_policy`` policy at the last budget, success and, in
    brackets, the fraction at the goal at the episode's end)."""
    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if len(block.records) != 2 or not rows or any(len(r) != 2 or not all(r) for r in rows):
        raise RenderError(f"{block.page}: own_dataset needs two records (methods, policies) and rows 'LABEL | METHOD'"
                          f" or 'LABEL | NAME / NAME', one per line")
    records = [(path, _read(path)) for path in block.records]
    (_, methods), (_, policies) = records
    budgets = methods["args"]["updates"]
    last = budgets[-1]
    runs = lambda record, method, u: [r for r in record["rows"] if r["method"] == method and r["updates"] == u]  # noqa: E731
    leaders = {}
    for u in budgets:
        means = {m: _mean([r["success"] for r in runs(methods, m, u)]) for _, m in rows if runs(methods, m, u)}
        top = max(means.values(), default=None)
        leaders[u] = next(iter(m for m, v in means.items() if v == top)) if list(means.values()).count(top) == 1 \
            else None
    lines = ["| method | " + " | ".join(f"{u:,} updates" for u in budgets) + f" | seconds | BC NLL at {_thousands(last)} "
             f"| violation at {_thousands(last)} |", "|---" * (len(budgets) + 4) + "|"]
    for label, spec in rows:
        if runs(methods, spec, last):
            cells = []
            for u in budgets:
                cell = _mean_std([r["success"] for r in runs(methods, spec, u)])
                cells.append(f"**{cell}**" if leaders[u] == spec else cell)
            final = runs(methods, spec, last)
            seconds = next(r["train_seconds"] for r in final if r["seed"] == 0)
            nll = [r["bc_nll"] for r in final if "bc_nll" in r]
            violation = [v for r in final for k, v in r.items() if k.endswith("violation")]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {seconds:.0f} | "
                         f"{f'{_mean(nll):.2f}' if nll else '--'} | {_small(_mean(violation)) if violation else '--'} |")
            continue
        acted = []
        for name in (n.strip() for n in spec.split("/")):
            found = ([r for r in policies["rows"] if r["method"] == name and r["updates"] == last]
                     or [r for r in policies.get("policy_rows", []) if r["policy"] == name])
            if not found:
                raise RenderError(f"{block.page}: own_dataset: no method or policy {name!r} in the records")
            acted.append(f"{_mean([r['success'] for r in found]):.2f} ({_mean([r['at_goal_at_end'] for r in found]):.2f})")
        lines.append(f"| {label} | " + " | " * (len(budgets) - 1) + " / ".join(acted) + " | | | |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ fetch

FETCH_AGENTS = (("qrl", "QRL"), ("crl", "Contrastive RL"), ("ddpg_her", "DDPG+HER"))


def render_fetch_success(block: Block) -> str:
    """Fetch's table: one row per record (the marker's lines name them, ``LABEL``, in the records' order) with its
    seeds and env steps, each agent's final success (smoothed over the last evaluations, as the record's summary
    holds it) and the zero-action reference's; bold: the best agent where two or more ran and one leads."""
    if not block.records or len(block.rows) != len(block.records):
        raise RenderError(f"{block.page}: fetch_success needs one row label per record (one per line), got "
                          f"{len(block.rows)} label(s) for {len(block.records)} record(s)")
    records = [(path, _read(path)) for path in block.records]
    lines = ["| task | seeds, env steps | " + " | ".join(name for _, name in FETCH_AGENTS) + " | zero action |",
             "|---" * (len(FETCH_AGENTS) + 3) + "|"]
    for label, (_, record) in zip(block.rows, records):
        summary, args = record["summary"], record["args"]
        final = {agent: summary[agent]["final_success"] for agent, _ in FETCH_AGENTS if agent in summary}
        best = max(final.values()) if len(final) > 1 and list(final.values()).count(max(final.values())) == 1 \
            else None
        cells = ["" if agent not in final else f"**{final[agent]:.3f}**" if final[agent] == best
                 else f"{final[agent]:.3f}" for agent, _ in FETCH_AGENTS]
        zero = summary.get("zero_action", {}).get("final_success")
        lines.append(f"| {label} | {len(args['seeds'])}, {_thousands(args['env_steps'])} | " + " | ".join(cells)
                     + f" | {'' if zero is None else f'{zero:.3f}'} |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ dmc

def _seeds_and_mean(values: Sequence[float]) -> str:
    """``a / b / c (mean ± std)``, one decimal."""
    return " / ".join(f"{v:.1f}" for v in values) + f" ({_mean_std(values, 1)})"


def render_dmc_device(block: Block) -> str:
    """The device loop against the host loop on DMC: the first record is ``benchmarks.dmc_device``'s, the others the
    host loop's (``benchmarks.dmc``). Per marker line ``LABEL | VARIANT | METHOD`` the final returns of each seed in
    both loops (the host's from the first host record holding the pair); then the whole training's env steps/s of
    both loops (noiseless, the twin) and the agent's env steps/s alone per task (the host's one env, MJX's env
    counts), as the device record measured them."""
    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if len(block.records) < 2 or not rows or any(len(r) != 3 or not all(r) for r in rows):
        raise RenderError(f"{block.page}: dmc_device needs the device record then the host records, and rows "
                          f"'LABEL | VARIANT | METHOD', one per line")
    records = [(path, _read(path)) for path in block.records]
    device, hosts = records[0][1], [record for _, record in records[1:]]
    lines = ["| | host loop (dm_control), seeds " + " / ".join(map(str, device["args"]["seeds"]))
             + " | device loop (MJX), seeds " + " / ".join(map(str, device["args"]["seeds"])) + " |", "|---|---|---|"]
    for label, variant, method in rows:
        host = next((h["summary"][variant][method]["returns"] for h in hosts
                     if method in h.get("summary", {}).get(variant, {})), None)
        if host is None or f"{variant} {method}" not in device["learning"]:
            raise RenderError(f"{block.page}: no record holds {method} on {variant} for both loops")
        finals = device["learning"][f"{variant} {method}"]["final"]
        lines.append(f"| {label} | {_seeds_and_mean(host)} | "
                     f"{_seeds_and_mean([finals[str(s)] for s in device['args']['seeds']])} |")
    rate = device["throughput"]
    for label, variant in (("whole training, env steps/s, Dreamer / Denoised MDP, noiseless", "noiseless"),
                           ("the same with the twin", "twin")):
        runs = [rate[f"{name}, {variant}"] for name in ("Dreamer", "Denoised MDP")]
        lines.append(f"| {label} | " + " / ".join(f"{r['host_env_steps_per_second']:.0f}" for r in runs) + " | "
                     + " / ".join(f"{r['device_env_steps_per_second']:.0f}" for r in runs) + " ("
                     + " / ".join(f"{r['device_over_host']:.2f}x" for r in runs) + ") |")
    tasks = [(key.split()[0], speeds) for key, speeds in device["envs"].items() if key.endswith(" noiseless")]
    for i, (task, speeds) in enumerate(tasks):
        counts = [k for k in speeds if k.startswith("mjx x")]
        label = (f"agent steps/s alone, noiseless, 1 env (host) / {' / '.join(k[5:] for k in counts)} envs (MJX): "
                 f"{task.split('-')[0]}" if i == 0 else task.split("-")[0])
        lines.append(f"| {label} | {speeds['host']:,.0f} | " + " / ".join(f"{speeds[k]:,.0f}" for k in counts) + " |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


def _probe_range(values: Sequence[float]) -> str:
    """The seeds' probe R² as a range at two decimals (one value where they agree; "to" where it goes below 0)."""
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return low if low == high else f"{low} to {high}" if min(values) < 0 else f"{low}-{high}"


def render_dmc_returns(block: Block) -> str:
    """Table 5.1 as this suite runs it from states: the marker names its records (``NAME=PATH``: a benchmarks.dmc
    record), and each line is a row ``TASK | LABEL | DREAMER | DENOISED`` (each ``NAME[+NAME...]:VARIANT``, the seeds
    of those records on that variant, or ``-``) or a mean row ``TASK | LABEL | mean ROW ROW... [seed=N]`` (the mean of
    the listed rows' means, 1-based among the lines, or of their seed ``N``; the higher in bold). Cells: each method's
    return, mean ± std over seeds (one value for one seed), then x -> distractor, the probe's held-out R² of the
    distractor's state from x, over the seeds ("-" noiseless). The task is printed on its first row."""
    named = {name: (block.page.parent / path).resolve() for name, path in block.options.items()}
    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if not named or not rows or any(len(r) not in (3, 4) or not all(r) for r in rows):
        raise RenderError(f"{block.page}: dmc_returns needs NAME=PATH records and rows 'TASK | LABEL | DREAMER | "
                          f"DENOISED' or 'TASK | LABEL | mean ROW ROW... [seed=N]', one per line")
    records = {name: _read(path) for name, path in named.items()}

    def seeds(ref: str, method: str) -> tuple[list[float], list[float]] | None:
        if ref == "-":
            return None
        names, _, variant = ref.partition(":")
        returns, probes = [], []
        for name in names.split("+"):
            if name not in records:
                raise RenderError(f"{block.page}: dmc_returns: no record named {name!r}; named: {sorted(records)}")
            run = records[name]["summary"].get(variant, {}).get(method)
            if run is None:
                raise RenderError(f"{block.page}: dmc_returns: record {name!r} holds no {method} on {variant!r}")
            returns += run["returns"]
            probes += run.get("probe", {}).get("x->distractor_state", [float("nan")] * len(run["returns"]))
        return returns, probes

    lines = ["| task | variant | Dreamer | Denoised MDP | x -> distractor, Dreamer | x -> distractor, Denoised MDP |",
             "|---|---|---|---|---|---|"]
    runs: list[tuple | None] = []
    previous_task = None
    for task, label, *refs in rows:
        shown = "" if task == previous_task else task
        previous_task = task
        if len(refs) == 1:
            words = refs[0].split()
            if words[0] != "mean" or len(words) < 2:
                raise RenderError(f"{block.page}: dmc_returns: a three-part row must be 'mean ROW ROW... [seed=N]', "
                                  f"got {refs[0]!r}")
            seed = next((int(w[5:]) for w in words if w.startswith("seed=")), None)
            picked = [runs[int(w) - 1] for w in words[1:] if not w.startswith("seed=")]
            if any(r is None for r in picked):
                raise RenderError(f"{block.page}: dmc_returns: a mean row may only average rows of runs, got {refs[0]!r}")
            means = [_mean(values) if values else None for values in (
                [r[i][0][seed] if seed is not None else _mean(r[i][0]) for r in picked if r[i] is not None]
                for i in (0, 1))]
            top = max((m for m in means if m is not None), default=None)
            cells = ["-" if m is None else f"**{m:.1f}**" if m == top else f"{m:.1f}" for m in means]
            lines.append(f"| {shown} | {label} | {cells[0]} | {cells[1]} | | |")
            runs.append(None)
            continue
        pair = (seeds(refs[0], "dreamer"), seeds(refs[1], "denoised"))
        runs.append(pair)
        cells = ["-" if r is None else f"{r[0][0]:.1f}" if len(r[0]) == 1 else
                 _mean_std(r[0], 1) for r in pair]
        probes = ["-" if r is None or any(v != v for v in r[1]) else _probe_range(r[1]) for r in pair]
        lines.append(f"| {shown} | {label} | {cells[0]} | {cells[1]} | {probes[0]} | {probes[1]} |")
    lines += ["", _records_line(block.page, [(path, records[name]) for name, path in named.items()])]
    return "\n".join(lines) + "\n"


def render_dmc_curves(block: Block) -> str:
    """Evaluation returns along training (``benchmarks.dmc``'s runs): per marker line ``LABEL | VARIANT | METHOD`` the
    first run of the records with that variant and method, its mean ± std return at each evaluation (columns: the
    first such run's env steps), the last in bold."""
    rows = [[p.strip() for p in line.split(" | ")] for line in block.rows]
    if not block.records or not rows or any(len(r) != 3 or not all(r) for r in rows):
        raise RenderError(f"{block.page}: dmc_curves needs records and rows 'LABEL | VARIANT | METHOD', one per line")
    records = [(path, _read(path)) for path in block.records]
    runs = [run for _, record in records for run in record["runs"]]
    chosen = []
    for label, variant, method in rows:
        run = next((r for r in runs if (r["variant"], r["method"]) == (variant, method)), None)
        if run is None:
            raise RenderError(f"{block.page}: no run of {method} on {variant} in the dmc_curves records")
        chosen.append((label, run))
    steps = chosen[0][1]["eval_steps"]
    lines = ["| run | " + " | ".join(_thousands(int(t)) for t in steps) + " |", "|---" * (len(steps) + 1) + "|"]
    for label, run in chosen:
        if run["eval_steps"] != steps:
            raise RenderError(f"{block.page}: dmc_curves' runs must share their evaluation steps ({label} differs)")
        cells = [f"{m:.1f} ± {sd:.1f}" for m, sd in zip(run["eval_return"], run["eval_return_std"])]
        cells[-1] = f"**{cells[-1]}**"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ speed

def render_speed_compiled(block: Block) -> str:
    """The speed report's compiled-update profile (:func:`~platonic_rl.benchmarks.timing.profile_compiled`) of each
    profiled update in the records: the whole update's time (one call, its own measurement), the XLA steps' traced
    time split into those that run matrix products (with what XLA fused into them) and the rest, the rest's largest
    parts by where in the program they came from, and the update over its products; the machine's matmul peak under
    the table."""
    if not block.records:
        raise RenderError(f"{block.page}: speed_compiled needs at least one record")
    lines = ["| update | sizes | one call ms | XLA steps traced ms | products ms (share) | rest ms | update / products "
             "| largest parts of the rest (ms) |", "|---|---|---|---|---|---|---|---|"]
    peaks, records = [], [(path, _read(path)) for path in block.records]
    for _, record in records:
        peaks.append(f"{record['matmul_peak_gflops']:.0f}")
        for name, update in record["updates"].items():
            compiled = update.get("profile", {}).get("compiled")
            if compiled is None:
                continue
            groups = "; ".join(f"{group} {ms:.2g}" for group, ms in compiled["groups"][:3])
            share = 100 * compiled["products_ms"] / compiled["traced_ms"]
            lines.append(f"| {name} | {update['size']} | {update['ms_one_call']:.3g} | {compiled['traced_ms']:.3g} | "
                         f"{compiled['products_ms']:.3g} ({share:.0f}%) | {compiled['other_ms']:.3g} | "
                         f"{compiled['traced_ms'] / compiled['products_ms']:.2f} | {groups} |")
    if len(lines) == 2:
        raise RenderError(f"{block.page}: no profiled update in the records (speed's cases with profile=True)")
    lines += ["", "float32 matmul peak measured in the same run: " + " / ".join(peaks) + " GFLOP/s. "
              + _records_line(block.page, records, commits=False)]
    return "\n".join(lines) + "\n"


def render_speed_summary(block: Block) -> str:
    """The results page's speed table from three records: the speed report (``--cases``: the matmul peak, the
    updates' times and shares of the peak, IQE's share of the Fetch update), its compiled-update profile (the
    products' share of the traced steps) and the loops' run (each loop's rate over its updates' rate alone)."""
    if len(block.records) != 3:
        raise RenderError(f"{block.page}: speed_summary needs three records: the speed report, its compiled profile "
                          f"and the loops' run")
    records = [(path, _read(path)) for path in block.records]
    (_, speed), (_, compiled), (loops_path, loops) = records
    updates, profiled = speed["updates"], compiled["updates"]
    peak = lambda u: f"{u['peak_fraction_one_call']:.0%} / {u['peak_fraction_in_scan']:.0%} of the peak"  # noqa: E731

    def products(name: str) -> str:
        run = profiled[name]["profile"]["compiled"]
        return (f"in the compiled update its products take {run['products_ms'] / run['traced_ms']:.0%} of the "
                f"steps' time ({compiled['matmul_peak_gflops']:.0f} GFLOP/s)")

    fetch, maze2d = updates["qrl_continuous"], updates["maze2d_qrl_w128_b256"]
    world = [updates[n]["peak_fraction_one_call"] for n in ("dreamer_cpu", "denoised_mdp_cpu") if n in updates]
    lines = ["| measurement | result |", "|---|---|",
             f"| float32 matmul peak, measured in the run | {speed['matmul_peak_gflops']:.0f} GFLOP/s |",
             f"| Fetch QRL update at C.3.3's size | {fetch['ms_one_call']:.0f} ms; {fetch['peak_fraction_one_call']:.0%} "
             f"of the peak as one call, {fetch['peak_fraction_in_scan']:.0%} in a scan; {products('qrl_continuous')} |",
             f"| discrete QRL update at C.3.1's size | {peak(updates['qrl'])} |",
             f"| maze2d `cpu` QRL update | {maze2d['ms_one_call']:.1f} ms; {peak(maze2d)}; "
             f"{products('maze2d_qrl_w128_b256')} |",
             f"| IQE's share of the Fetch QRL update | {speed['iqe_share']['qrl_continuous']['fraction']:.0%} (the update "
             f"minus the same update with an l2 head) |",
             f"| world-model updates at the `cpu` preset | {min(world):.0%}-{max(world):.0%} of the peak; "
             f"{products('denoised_mdp_cpu')} (Denoised MDP) |",
             f"| the offline loop and the device loop's QRL iteration ([separate run]({_link(block.page, loops_path)}), "
             f"{loops['matmul_peak_gflops']:.0f} GFLOP/s) | {loops['loops']['offline']['share_of_updates']:.2f} and "
             f"{loops['loops']['device']['share_of_updates']:.2f} of their updates' rate alone |"]
    lines += ["", _records_line(block.page, records)]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ maze2d

MAZE2D_LAYOUTS = ("large", "medium", "umaze")


@dataclasses.dataclass(frozen=True)
class Maze2dRow:
    """One row of the maze2d table, as its marker line says: ``LABEL | METHOD | FOLDER... [| GROUP]``. A layout's
    cells come from the first folder holding ``evals/<layout>-<METHOD>.json``; ``paper:METHOD`` reads the published
    numbers kept in the first folder's ``results.json``; in each column the best of a ``GROUP`` is bold."""
    label: str
    method: str
    folders: tuple[Path, ...]
    group: str | None


def _maze2d_rows(block: Block) -> list[Maze2dRow]:
    rows = []
    for line in block.rows:
        parts = [p.strip() for p in line.split(" | ")]
        if len(parts) not in (3, 4) or not parts[0] or not parts[1] or not parts[2]:
            raise RenderError(f"{block.page}: a maze2d_scores row must read 'LABEL | METHOD | FOLDER... [| GROUP]', "
                              f"got {line!r}")
        folders = tuple((block.page.parent / f).resolve() for f in parts[2].split())
        rows.append(Maze2dRow(parts[0], parts[1], folders, parts[3] if len(parts) == 4 else None))
    if not rows:
        raise RenderError(f"{block.page}: maze2d_scores needs rows (one per line after the marker's first)")
    return rows


def _maze2d_cells(block: Block, row: Maze2dRow) -> tuple[dict, set[Path]]:
    """``{layout: dict(single, multi, at_end, seconds)}`` of one row (None for a layout no folder holds; a row no
    folder holds at all is refused) and the folders read."""
    if row.method.startswith("paper:"):
        method = row.method.split(":", 1)[1]
        paper = _read(row.folders[0] / "results.json").get("paper", {})
        if method not in paper:
            raise RenderError(f"{block.page}: {row.folders[0]}/results.json holds no published numbers for {method!r}")
        return {layout: dict(single=paper[method]["single"][layout], multi=paper[method]["multi"][layout])
                for layout in MAZE2D_LAYOUTS}, set()
    cells, used = {}, set()
    for layout in MAZE2D_LAYOUTS:
        path = next((f / "evals" / f"{layout}-{row.method}.json" for f in row.folders
                     if (f / "evals" / f"{layout}-{row.method}.json").is_file()), None)
        if path is None:
            cells[layout] = None
            continue
        entry = read_json(path, "a maze2d evaluation record")
        ends = [entry[g].get("at_goal_at_end_mean") for g in ("single", "multi")]
        cells[layout] = dict(single=entry["single"]["mean"], multi=entry["multi"]["mean"],
                             at_end=None if None in ends else sum(ends) / 2, seconds=entry.get("seconds_per_action"))
        used.add(path.parent.parent)
    if not used:
        raise RenderError(f"{block.page}: no evals/<layout>-{row.method}.json in "
                          + ", ".join(str(f) for f in row.folders))
    return cells, used


def render_maze2d_scores(block: Block) -> str:
    """maze2d's table: per row (the marker's lines) and layout the D4RL-normalised score, single goal / random goals
    (means over seeds), the average of the six, the fraction of episodes at the goal at their end (mean of both goal
    settings, where the records hold it) and the milliseconds per action (the range over layouts); the best of each
    group in bold; a layout not yet run reads "not run" (and the row has no average); under it, the records read and
    their commits."""
    rows = _maze2d_rows(block)
    table, used = [], set()
    for row in rows:
        cells, folders = _maze2d_cells(block, row)
        used |= folders
        ran = [c for c in cells.values() if c is not None]
        table.append((row, cells, sum(c["single"] + c["multi"] for c in ran) / 6 if len(ran) == len(cells) else None))
    best: dict[tuple[str | None, str], float] = {}
    for row, cells, average in table:
        if row.group:
            for layout, c in cells.items():
                key = (row.group, layout)
                if c is not None:
                    best[key] = max(best.get(key, float("-inf")), c["single"] + c["multi"])
            if average is not None:
                best[row.group, "average"] = max(best.get((row.group, "average"), float("-inf")), average)
    bold = lambda text, row, key, value: f"**{text}**" if row.group and value == best[row.group, key] else text  # noqa: E731
    lines = ["| method | large | medium | umaze | average of six | at the goal at the end (L / M / U) | ms per action |",
             "|---|---|---|---|---|---|---|"]
    for row, cells, average in table:
        scores = ["not run" if c is None else bold(f"{c['single']:.1f} / {c['multi']:.1f}", row, layout,
                                                   c["single"] + c["multi"]) for layout, c in cells.items()]
        ends = [None if c is None else c.get("at_end") for c in cells.values()]
        at_end = " / ".join("–" if e is None else f"{e:.2f}" for e in ends) if any(e is not None for e in ends) else ""
        ms = sorted(1e3 * c["seconds"] for c in cells.values() if c is not None and c.get("seconds") is not None)
        speed = "" if not ms else f"{ms[0]:.1f}" if f"{ms[0]:.1f}" == f"{ms[-1]:.1f}" else f"{ms[0]:.1f}-{ms[-1]:.1f}"
        lines.append(f"| {row.label} | " + " | ".join(scores)
                     + f" | {'–' if average is None else bold(f'{average:.1f}', row, 'average', average)} | {at_end} "
                       f"| {speed} |")
    lines += ["", _records_line(block.page, [(f / "results.json", _read(f / "results.json"))
                                             for f in sorted(used, key=lambda f: f.name)])]
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[Block], str]] = {
    "maze2d_scores": render_maze2d_scores,
    "ogbench_time": render_ogbench_time,
    "speed_compiled": render_speed_compiled,
    "statuses": render_statuses,
    "status_counts": render_status_counts,
    "ogbench_success": render_ogbench_success,
    "ogbench_tasks": render_ogbench_tasks,
    "device_loop_learning": render_device_loop_learning,
    "ogbench_teleport": render_ogbench_teleport,
    "fetch_success": render_fetch_success,
    "dmc_device": render_dmc_device,
    "dmc_curves": render_dmc_curves,
    "mountaincar_scores": render_mountaincar_scores,
    "own_dataset": render_own_dataset,
    "quasimetric_large": render_quasimetric_large,
    "representations": render_representations,
    "convergence": render_convergence,
    "speed_summary": render_speed_summary,
    "dmc_returns": render_dmc_returns,
}


# ------------------------------------------------------------------------------------------------ pages

def render_page(page: Path, text: str | None = None) -> str:
    """``page``'s text (or ``text``, read as that page) with every marked table rendered."""
    text = page.read_text() if text is None else text
    for block in reversed(blocks(page, text)):
        if block.renderer not in RENDERERS:
            raise RenderError(f"{page}: unknown renderer {block.renderer!r}; known: {sorted(RENDERERS)}")
        text = text[:block.start] + RENDERERS[block.renderer](block) + text[block.end:]
    return text


def differences(root: Path = ROOT) -> list[str]:
    """One line per page whose marked tables differ from what their records render (empty: the docs are current)."""
    out = []
    for page in pages(root):
        text = page.read_text()
        rendered = render_page(page, text)
        if rendered != text:
            old, new = text.splitlines(), rendered.splitlines()
            first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            out.append(f"{page.relative_to(root)}:{first + 1}: differs from its records "
                       f"(page: {old[first] if first < len(old) else '<end>'!r}; "
                       f"rendered: {new[first] if first < len(new) else '<end>'!r})")
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m platonic_rl.benchmarks.render_docs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 naming each page whose tables differ from their records")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check:
        found = differences()
        for line in found:
            print(line)
        print(f"{len(found)} page(s) differ from their records" if found else "every rendered table is current")
        return 1 if found else 0
    changed = 0
    for page in pages():
        text = page.read_text()
        rendered = render_page(page, text)
        if rendered != text:
            page.write_text(rendered)
            changed += 1
            print(f"rendered {page.relative_to(ROOT)}")
    print(f"{changed} page(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
