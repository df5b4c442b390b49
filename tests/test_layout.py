"""The rooms of the suite and their import arrows, read with ``ast`` (nothing is imported or run).

Rooms, lowest first: ``common`` (building blocks) < the algorithm cores ``qrl``, ``denoised``, ``replearn`` and
``envs`` < ``agents`` < ``training`` < ``benchmarks``. No module imports a room above its own, and nothing
-- code, tests or the README's code -- imports the suite by its folder names (``import agents``): always as
``platonic_rl.<package>``, so that a user's own ``agents`` or ``envs`` can neither shadow nor be shadowed.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = {"common": 0, "qrl": 1, "denoised": 1, "replearn": 1, "envs": 1, "agents": 2, "training": 3, "benchmarks": 4}


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import statement, including those inside functions."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def suite_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "platonic_rl" and len(parts) > 1 else None


def python_files() -> list[Path]:
    return [p for room in RANK for p in sorted((ROOT / room).glob("*.py"))]


def test_no_module_imports_a_room_above_its_own():
    upward = []
    for path in python_files():
        room = path.parent.name
        for line, module in imported_modules(path.read_text()):
            target = suite_room(module)
            if target is not None and RANK.get(target, 99) > RANK[room]:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({room}) imports {module} ({target})")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_the_cores_never_import_agents_or_training():
    for path in python_files():
        if path.parent.name in ("qrl", "denoised", "replearn", "envs", "common"):
            targets = {suite_room(m) for _, m in imported_modules(path.read_text())}
            assert not targets & {"agents", "training", "benchmarks"}, path


def test_nothing_imports_the_suite_by_its_folder_names():
    readme_code = "\n".join(re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M))
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in python_files() + sorted((ROOT / "tests").rglob("*.py"))}
    sources["README.md"] = readme_code
    bare = [f"{name}:{line} imports {module}" for name, source in sources.items()
            for line, module in imported_modules(source) if module.split(".")[0] in RANK]
    assert not bare, "import these as platonic_rl.<package>:\n" + "\n".join(bare)


# Inside the benchmarks room: a benchmark (a command, ``python -m platonic_rl.benchmarks.<name>``) imports no other
# benchmark. What several of them share -- how runs are saved, how updates are timed, the agents' sizes per benchmark,
# the QRL slice that the maze2d slice and the accelerator check both run, the DMC probe data -- lives in helpers, which
# are no commands and import no benchmark; anything else shared belongs in a lower room (as QRL's critic checks in
# agents.qrl_diagnostics).
BENCHMARK_HELPERS = {"report", "timing", "presets", "qrl_slice", "dmc_probe"}
READS_EVERY_BENCHMARK = {"render_docs"}  # renders the docs' tables from the benchmarks' records; nothing imports it
DIAGNOSES = {"ogbench_teleport": "ogbench"}  # a diagnosis of one benchmark's trained runs, read through that benchmark's
#                                            own functions (its scales, training read-back, rows); nothing imports it


def benchmark_imports(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, benchmark module, names imported from it) of every import of a ``platonic_rl.benchmarks`` module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[2], []) for a in node.names
                    if a.name.startswith("platonic_rl.benchmarks.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "platonic_rl.benchmarks":
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(
                "platonic_rl.benchmarks."):
            out.append((node.lineno, node.module.split(".")[2], [a.name for a in node.names]))
    return out


def test_benchmarks_import_only_helpers():
    wrong = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        me = path.stem
        for line, module, names in benchmark_imports(path.read_text()):
            private = [n for n in names if n.startswith("_")]
            if (module not in BENCHMARK_HELPERS and module != me and me not in READS_EVERY_BENCHMARK
                    and DIAGNOSES.get(me) != module) or private:
                wrong.append(f"benchmarks/{path.name}:{line} imports benchmarks.{module}"
                             + (f" (private {private})" if private else ""))
    assert not wrong, ("a benchmark imports another benchmark or a helper's internals; move what is shared to a "
                       "helper (BENCHMARK_HELPERS) or a lower room:\n" + "\n".join(wrong))


def test_the_benchmark_helpers_are_modules_not_commands():
    """A helper has no command line: no ``main`` and no ``__main__`` block (else it is a benchmark, and the rule
    above would let benchmarks import it)."""
    for name in BENCHMARK_HELPERS:
        path = ROOT / "benchmarks" / f"{name}.py"
        assert path.is_file(), f"BENCHMARK_HELPERS names benchmarks/{name}.py, which does not exist"
        tree = ast.parse(path.read_text())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "main" not in functions and "__main__" not in path.read_text(), f"benchmarks/{name}.py is a command"


def test_the_benchmark_import_reader_sees_every_form():
    source = ("from platonic_rl.benchmarks import report, maze2d\nimport platonic_rl.benchmarks.speed\n"
              "def f():\n    from platonic_rl.benchmarks.maze2d import _qrl, scales\n")
    assert sorted(benchmark_imports(source)) == [(1, "maze2d", []), (1, "report", []), (2, "speed", []),
                                                 (4, "maze2d", ["_qrl", "scales"])]


def test_the_checker_sees_an_upward_import():
    source = "import jax\nfrom platonic_rl.training.run import RunDirectory\ndef f():\n    import platonic_rl.agents\n"
    rooms = [suite_room(m) for _, m in imported_modules(source)]
    assert rooms == [None, "training", "agents"]


def test_the_longest_first_schedule_names_test_files_that_exist():
    import conftest  # tests/conftest.py: the order xdist hands files to its workers

    names = conftest.LONGEST_FIRST
    assert len(set(names)) == len(names)
    missing = [n for n in names if not (ROOT / "tests" / n).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names files that do not exist: {missing}"


def module_name(path: Path) -> str:
    return "platonic_rl." + ".".join(path.relative_to(ROOT).with_suffix("").parts)


def suite_imports(path: Path) -> set[str]:
    """The suite's modules ``path`` imports (at any depth of the file, ``from package import module`` included)."""
    known = {module_name(p) for p in python_files()}
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {node.module} & known
            out |= {f"{node.module}.{a.name}" for a in node.names} & known
    return out - {module_name(path)}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first search of ``graph`` (module -> modules it imports), each once."""
    cycles, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_two_files_import_each_other_even_lazily():
    graph = {module_name(p): suite_imports(p) for p in python_files()}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles between the suite's files:\n" + "\n".join(" -> ".join(c) for c in cycles)


def private_uses(source: str) -> list[tuple[int, str]]:
    """(line, name) of each private name of another suite module used here: ``from platonic_rl.x import _y`` and
    ``x._y`` where ``x`` was imported as a suite module."""
    tree = ast.parse(source)
    aliases, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname or a.name for a in node.names if a.name.startswith("platonic_rl.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("platonic_rl"):
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
            aliases |= {a.asname or a.name for a in node.names if not a.name.startswith("_")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base in aliases:
                out.append((node.lineno, f"{base}.{node.attr}"))
    return out


def test_no_module_uses_another_modules_private_names():
    used = [f"{p.relative_to(ROOT)}:{line} uses {name}" for p in python_files() for line, name in private_uses(
        p.read_text())]
    assert not used, "a private name used outside its module (make it public, or move the code):\n" + "\n".join(used)


def test_the_cycle_and_private_name_readers_see_what_they_look_for():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []
    source = ("from platonic_rl.benchmarks import report\nimport platonic_rl.envs.maze2d as m\n"
              "from platonic_rl.agents.qrl import _secret, public\nx = report._plain(1) + m._walls + public._z\n"
              "y = self._own + report.plain\n")
    assert sorted(private_uses(source)) == [(3, "platonic_rl.agents.qrl._secret"), (4, "m._walls"),
                                            (4, "public._z"), (4, "report._plain")]


def uncommented_config_fields(source: str) -> list[str]:
    """``Class.field`` of every field of a ``*Config`` class in ``source`` without a comment: none on its lines, none
    on the line just above it, no docstring just below it."""
    lines, missing = source.splitlines(), []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ClassDef) and node.name.endswith("Config")):
            continue
        for i, field in enumerate(node.body):
            if not isinstance(field, ast.AnnAssign):
                continue
            own = "\n".join(lines[field.lineno - 1:field.end_lineno])
            above = lines[field.lineno - 2].strip()
            below = node.body[i + 1] if i + 1 < len(node.body) else None
            docstring = isinstance(below, ast.Expr) and isinstance(below.value, ast.Constant) and isinstance(
                below.value.value, str)
            if "#" not in own and not above.startswith("#") and not docstring:
                missing.append(f"{node.name}.{field.target.id}")
    return missing


def test_every_config_field_says_what_it_is():
    """A user reads a config to learn its knobs: every field of every ``*Config`` carries a one-line comment (or a
    docstring), as OGBench's agents' configs do."""
    assert uncommented_config_fields("class AConfig:\n    a: int = 1  # says\n    b: int = 2\n") == ["AConfig.b"]
    missing = [f"{path.relative_to(ROOT)}: {name}" for path in python_files()
               for name in uncommented_config_fields(path.read_text())]
    assert not missing, "comment these config fields:\n" + "\n".join(missing)
