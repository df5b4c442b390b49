"""The API reference builds from the docstrings, offline, and has a page for every public module of the suite."""
import pkgutil
from pathlib import Path

import pytest

pdoc = pytest.importorskip("pdoc")
import pdoc.extract  # noqa: E402


def public_modules() -> list[str]:
    import platonic_rl

    names = ["platonic_rl"]
    for info in pkgutil.walk_packages(platonic_rl.__path__, "platonic_rl."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def render(modules: str, directory: Path) -> None:
    """The README's command, run in-process (pdoc renders locally; nothing is fetched). Without source views:
    highlighting the source of every function took most of the build's 20 s."""
    pdoc.render.configure(show_source=False)
    try:
        pdoc.pdoc(modules, output_directory=directory)
    finally:
        pdoc.render.configure()  # pdoc's defaults again


def test_the_reference_lists_every_public_module_and_renders_a_page(tmp_path):
    # What the whole build (below, slow) pages: the modules pdoc finds from the package, each one rendered. Here one
    # page is rendered, in a tenth of the whole build's time.
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "python3 -m pdoc platonic_rl --no-show-source -o build/api" in readme
    modules = public_modules()
    assert len(modules) > 40 and "platonic_rl.agents.qrl" in modules and "platonic_rl.training.run" in modules
    missing = sorted(set(modules) - set(pdoc.extract.walk_specs(["platonic_rl"])))
    assert not missing, f"modules pdoc does not find: {missing}"
    render("platonic_rl.training.run", tmp_path)
    page = (tmp_path / "platonic_rl" / "training" / "run.html").read_text()
    assert "RunDirectory" in page and "config.json" in page  # rendered from the docstrings
    assert "http://" not in page.replace("http://www.w3.org", "")  # no remote scripts or styles


@pytest.mark.slow  # ~13 s: pdoc renders every module
def test_the_reference_builds_and_covers_every_public_module(tmp_path):
    render("platonic_rl", tmp_path)
    pages = {str(p.relative_to(tmp_path).with_suffix("")).replace("/", ".") for p in tmp_path.rglob("*.html")}
    missing = sorted(set(public_modules()) - pages)
    assert not missing, f"modules without a page in the API reference: {missing}"
