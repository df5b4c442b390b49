"""The README and every page of docs/ hold what they show: every ```python block runs as written, every command
(``python3 -m platonic_rl...`` in ```bash blocks and in inline code) parses with that module's own CLI, and every
relative link and picture resolves to a file of the repository (a ``#anchor`` to a heading of its target)."""
from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
from platonic_rl.benchmarks.render_docs import heading_anchor
from test_layout import BENCHMARK_HELPERS  # tests/test_layout.py: the helpers, which are no benchmarks

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
STUDIES = sorted((ROOT / "docs" / "studies").glob("*.md"))  # what explains a result, each on its own page
PAGES = [README, *DOCS, *STUDIES]
TEXT = {page: page.read_text() for page in PAGES}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def code_blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def blank(match: re.Match) -> str:
    """The match with every character but newlines replaced by a space: line numbers stay where they were."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """``text`` as rendered text, line for line: fenced blocks, indented code blocks (not nested list items) and
    inline code spans blanked."""
    text = FENCE.sub(blank, text)
    text = re.sub(r"^(?: {4}|\t)(?![-*] |\d+\. ).*$", blank, text, flags=re.M)
    return re.sub(r"`[^`\n]*`", blank, text)


def commands(text: str) -> list[list[str]]:
    """argv of every ``python3 -m`` / ``python -m`` command: whole lines of bash blocks (split at ``&&``, comments
    dropped) and inline code spans; spans that are usage synopses (``[--flag ...]``, ``...``) are skipped."""
    lines = [line.split("#")[0] for block in code_blocks(text, "bash") for line in block.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    parts += [span for span in re.findall(r"`(python3? -m [^`]+)`", FENCE.sub("", text))
              if "[" not in span and "..." not in span]
    return [shlex.split(part) for part in parts if re.match(r"python3? -m ", part)]


slug = heading_anchor  # GitHub's anchor of a heading, as the docs renderer reads the results page's sections


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (a repeated heading's second anchor gets ``-1``, as on GitHub)."""
    found: dict[str, int] = {}
    result = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", page.read_text()), flags=re.M):
        base = slug(heading)
        count = found.get(base, 0)
        result.add(base if count == 0 else f"{base}-{count}")
        found[base] = count + 1
    return result


def link_file(page: Path, target: str) -> Path:
    """The file a relative link of ``page`` points to (``page`` itself for a bare ``#anchor``)."""
    path = target.partition("#")[0]
    return (page.parent / path).resolve() if path else page


def links(page: Path) -> list[str]:
    """Targets of the markdown links and pictures of ``page`` that are not web addresses."""
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose(TEXT[page]))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


BLOCKS = [(page, i, block) for page in PAGES for i, block in enumerate(code_blocks(TEXT[page], "python"))]
COMMANDS = [(page, argv) for page in PAGES for argv in commands(TEXT[page]) if argv[2] not in ("pip", "pytest", "pdoc")]
BENCHMARKS = sorted(f"platonic_rl.benchmarks.{p.stem}" for p in (ROOT / "benchmarks").glob("*.py")
                    if p.stem != "__init__" and p.stem not in BENCHMARK_HELPERS)
# Blocks that run only with `-m slow`, each named by its page and a line it holds, with what the default suite runs in
# its place. They stay blocks that run as written; the default suite keeps to its time on 2 cores.
SLOW_BLOCKS = {
    # ~50 s: two seeds of the world-model loop compiled around MJX's reacher. By default the loop runs vmapped over
    # seeds on a toy env of the same form (tests/test_world_model_device.py) and MJX's envs step on their own
    # (tests/test_dmc_jax.py).
    ("docs/training.md", "agents, metrics = jax.jit(jax.vmap(loop.train))"),
    # ~20 s: four of MJX's reacher with its twin reset and stepped in one program. By default the twin's env steps
    # alone (tests/test_dmc_jax.py) and the loops' tests vmap toy envs.
    ("docs/environments.md", 'env = DMCJaxEnv("reacher-easy", "distractors")'),
    # ~15-35 s: GCBC and QRL trained offline from an .npz with run directories. By default the offline loop, its run
    # directories and the registry's presets are tested on their own (tests/test_train.py, tests/test_run_directory.py,
    # tests/test_benchmark_own_dataset.py), and the README's first block runs.
    ("README.md", 'np.savez("walks.npz"'),
}


def slow_entries(page: Path, block: str) -> list[tuple[str, str]]:
    """The entries of :data:`SLOW_BLOCKS` that name ``block`` of ``page``."""
    return [(p, line) for p, line in SLOW_BLOCKS if name(page) == p and line in block]


def test_the_readme_is_the_front_door():
    text = TEXT[README]
    assert len(text.splitlines()) <= 250
    # The two set-up commands are there as written.
    assert "python3 -m pip install -e . && python3 -m platonic_rl.benchmarks.mountaincar" in text
    assert 'python3 -m pip install -e ".[test]" && python3 -m pytest' in text
    assert len(code_blocks(text, "python")) >= 2
    linked = {Path(target.split("#")[0]).name for target in links(README) if target.startswith("docs/")}
    assert {page.name for page in DOCS} <= linked, "every docs page is linked from the README"


@pytest.mark.parametrize("page", DOCS, ids=name)
def test_every_docs_page_has_a_title_says_what_it_covers_and_links_back(page):
    lines = TEXT[page].splitlines()
    assert lines[0].startswith("# "), f"{name(page)} starts with its title"
    assert lines[1] == "" and lines[2] and not lines[2].startswith("#"), f"{name(page)}: a sentence under the title"
    assert "../README.md" in links(page), f"{name(page)} links back to the README"


@pytest.mark.parametrize("page", STUDIES, ids=name)
def test_every_study_opens_with_its_question_and_answer_and_is_linked_from_the_results(page):
    lines = TEXT[page].splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", f"{name(page)} starts with its title"
    assert lines[2].startswith("**Question.**"), f"{name(page)}: its question under the title"
    assert any(line.startswith("**Answer.**") for line in lines[3:12]), f"{name(page)}: its answer right after"
    assert "../results.md" in {t.partition("#")[0] for t in links(page)}, f"{name(page)} links back to the results"
    linking = {link_file(other, t) for other in PAGES if other != page for t in links(other)}
    assert page in linking, f"no page links to {name(page)}"


def test_every_benchmark_has_a_command_in_the_docs():
    shown = {argv[2] for _, argv in COMMANDS}
    assert set(BENCHMARKS) <= shown, f"benchmarks without a command in README.md or docs/: {set(BENCHMARKS) - shown}"
    assert "platonic_rl.training.offline" not in shown  # MountainCar has one entry point: its benchmark


@pytest.mark.parametrize("page,index,block", [
    pytest.param(p, i, b, marks=[pytest.mark.slow] if slow_entries(p, b) else [],
                 id=f"{name(p)}:{i}:" + re.sub(r"\W+", "_", b.split("\n")[1] if "\n" in b else b)[:30])
    for p, i, b in BLOCKS])
def test_python_block_runs_as_written(page, index, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything a block writes lands here
    monkeypatch.setenv("PLATONIC_RL_DATA", str(tmp_path))  # and generated datasets too
    exec(compile(block, f"{name(page)} python block {index}", "exec"), {"__name__": "docs"})


@pytest.mark.parametrize("page,argv", COMMANDS, ids=[f"{name(p)}:" + " ".join(a[2:])[:60] for p, a in COMMANDS])
def test_command_parses(page, argv):
    module = importlib.import_module(argv[2])
    rest = argv[3:]
    if hasattr(module, "parse_args"):
        module.parse_args(rest)
    else:
        import tyro

        tyro.cli(module.Args, args=rest)


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        anchor = target.partition("#")[2]
        file = link_file(page, target)
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{name(page)}: " + "; ".join(broken)


def test_every_slow_block_names_one_block():
    for page, line in SLOW_BLOCKS:
        held = [i for p, i, b in BLOCKS if (page, line) in slow_entries(p, b)]
        assert len(held) == 1, f"SLOW_BLOCKS: {line!r} is in {len(held)} python blocks of {page}, not one"


def test_every_result_folder_is_read_by_a_page():
    # A record no page links to is either superseded (removed; git keeps it) or a measurement nobody can find.
    linked = set()
    for page in PAGES:
        for target in links(page):
            file = link_file(page, target)
            if file.is_relative_to(ROOT / "docs" / "results") and file != ROOT / "docs" / "results":
                linked.add(file.relative_to(ROOT / "docs" / "results").parts[0])
    folders = {p.name for p in (ROOT / "docs" / "results").iterdir() if p.is_dir()}
    assert not folders - linked, f"docs/results folders no page links to: {sorted(folders - linked)}"


def test_the_link_checker_sees_links_and_anchors():
    assert slug("Online loop on host-stepped envs: `training/goal_online.py`") == \
        "online-loop-on-host-stepped-envs-traininggoal_onlinepy"
    assert slug("maze2d (Table 4.2)") == "maze2d-table-42"
    text = "see [a](x.md#y), ![p](results/p.png), [web](https://example.org) and `[not](code.md)`\n"
    assert re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", prose(text)) == ["x.md#y", "results/p.png", "https://example.org"]
