"""The README, the docs and the code's comments say what was measured and how, not how the work was organised: no
issue numbers, no sittings or work sessions, no runs that "shared the cores" with other work (a timing measured on a
loaded machine is "not a speed figure"), and no bare "the target" standing for a claim the page never states (each
results section states its claim; the text says "the claim").

Markdown is read as rendered prose (fenced code, indented code and inline code dropped); Python files only in their
comments and strings (docstrings, messages), never their code. "target" alone is no process word -- target networks,
reacher's target, SAC's target entropy -- so only the phrases that use it as a pass/fail criterion are flagged
("the target is met", "against the target", "the target (x >= 0.9)"), and only in Markdown."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest
from test_docs import prose  # tests/test_docs.py: Markdown as rendered text, line for line

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "benchmarks", "common", "denoised", "envs", "qrl", "replearn", "training", "tests")
THIS = Path(__file__).resolve()

# Patterns for every scanned text (Markdown prose, Python comments and strings).
WORK = {
    "issue number": r"\bissues?\s*#?\d+",
    "sitting": r"\bsittings?\b",
    "work session": r"(?<!pytest\s)(?<!test\s)(?<!browser\s)\bsessions?\b",
    "shared the cores": r"\bshar(?:ed|es|ing)\s+(?:the\s+|its\s+)?(?:\d+\s+|two\s+)?cores\b",
    "other work": r"\bother\s+work\b",
}
# Patterns for Markdown prose only: "the target" / "the issue" used as a criterion nobody states.
CLAIM = {
    "the issue": r"\b(?:the|this|that)\s+issue(?:'s)?\b",
    "target met/missed":
        r"\btargets?\s+(?:[\d.]+\s+)?(?:(?:is|are|was|were)\s+)?(?:not\s+)?(?:met|missed)\b"
        r"|\b(?:met|missed)\s+targets?\b",
    "against/meet/miss the target":
        r"\b(?:against|meets?|meeting|miss(?:es|ed)?|missing|los(?:es|e|ing|t))\s+the\s+(?:issue's\s+)?targets?\b",
    "the target's letter": r"\btarget's\s+letter\b",
    "the target (criterion)": r"\bthe\s+target\s+(?:is\s+|\()[^).;]*?(?:>=|≥|<=|≤|at\s+or\s+above|ahead\s+of)",
}
WORK_RE = {name: re.compile(p, re.I) for name, p in WORK.items()}
CLAIM_RE = {name: re.compile(p, re.I) for name, p in CLAIM.items()}
def find(text: str, patterns: dict[str, re.Pattern]) -> list[tuple[int, str, str]]:
    """(line, pattern name, matched words) of every match of ``patterns`` in ``text`` (a match may run over a line
    break, as prose wraps), lines counted from 1, in the order of the text."""
    hits = [(text.count("\n", 0, m.start()) + 1, name, " ".join(m.group(0).split()))
            for name, pattern in patterns.items() for m in pattern.finditer(text)]
    return sorted(hits)


def python_words(source: str) -> str:
    """The comments and strings of ``source`` at their own lines, everything else blanked (code is not scanned)."""
    lines = [""] * (source.count("\n") + 2)
    kinds = {tokenize.COMMENT, tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in kinds:
            for offset, part in enumerate(token.string.split("\n")):
                lines[token.start[0] - 1 + offset] += " " + part
    return "\n".join(lines)


def markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_files() -> list[Path]:
    files = sorted(ROOT.glob("*.py")) + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in files if p.resolve() != THIS]


def scan_markdown(page: Path) -> list[tuple[int, str, str]]:
    return find(prose(page.read_text()), {**WORK_RE, **CLAIM_RE})


def scan_python(path: Path) -> list[tuple[int, str, str]]:
    return find(python_words(path.read_text()), WORK_RE)


def report(path: Path, hits: list[tuple[int, str, str]]) -> str:
    return "; ".join(f"{path.relative_to(ROOT)}:{line}: {name} ({words!r})" for line, name, words in hits)


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_says_what_was_measured_not_how_the_work_went(page):
    hits = scan_markdown(page)
    assert not hits, report(page, hits)


def test_python_comments_and_strings_say_nothing_of_how_the_work_went():
    hits = [report(path, found) for path in python_files() if (found := scan_python(path))]
    assert not hits, "; ".join(hits)


def test_the_scanner_finds_planted_words_and_leaves_legitimate_ones():
    planted = {
        "issue number": "as issue 34's item 2 asks",
        "sitting": "run in three sittings",
        "work session": "beside this session's tests",
        "shared the cores": "the runs shared the cores two at a time",
        "other work": "measured beside other work",
        "the issue": "the issue asked for a pair",
        "target met/missed": "the target is met on cheetah",
        "against/meet/miss the target": "Against the issue's target: above Dreamer",
        "the target's letter": "ahead on all four, the target's letter",
        "the target (criterion)": "The target (QRL >= 0.9 on umaze) is not met",
    }
    for name, text in planted.items():
        assert name in {found for _, found, _ in find(prose(text), {**WORK_RE, **CLAIM_RE})}, name
    legitimate = ("α adapted towards the target entropy", "soft target network updates", "y took the target, which "
                  "no action moves", "the fingertip within 0.05 of the target", "one on-disk cache per pytest session",
                  "`the target is met` in code", "the claim is met on cheetah")
    for text in legitimate:
        assert not find(prose(text), {**WORK_RE, **CLAIM_RE}), text
    # Python: comments and strings are read, code is not.
    source = "session = make()  # as issue 12 asks\nx = 'run in two sittings'\n"
    assert [(line, name) for line, name, _ in find(python_words(source), WORK_RE)] == \
        [(1, "issue number"), (2, "sitting")]
