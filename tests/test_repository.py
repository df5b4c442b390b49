"""What the repository may hold: results and their small records, never checkpoints or large binaries (a submission
that carries them is too large to land, and checkpoints stay on the machine that trained)."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LARGEST_FILE_MB = 5


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True, text=True).stdout


@pytest.fixture(scope="module")
def committed() -> dict[str, int]:
    """Path -> size in bytes of every file in the index (what a commit holds), in this repository's own checkout."""
    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    if top != ROOT:
        pytest.skip(f"the git repository here is {top}, not this project's checkout")
    entries = [line.split(maxsplit=3) for line in git("ls-files", "-s").splitlines()]  # mode, blob, stage, path
    blobs = "\n".join(blob for _, blob, _, _ in entries) + "\n"
    sizes = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=ROOT, input=blobs,
                           capture_output=True, check=True, text=True).stdout.split()
    return {path: int(size) for (_, _, _, path), size in zip(entries, sizes)}


def test_no_checkpoint_or_large_file_is_committed(committed):
    assert committed, "git ls-files listed nothing"
    assert [f for f in committed if "checkpoints" in Path(f).parts] == []
    large = {f: size for f, size in committed.items() if size > LARGEST_FILE_MB * 2 ** 20}
    assert large == {}, f"files over {LARGEST_FILE_MB} MiB are committed: {large}"
    assert committed["LICENSE"] == (ROOT / "LICENSE").stat().st_size  # the sizes are the files' own


def test_checkpoints_are_ignored_at_any_depth(committed):
    for path in ("docs/results/a/b/runs/c/checkpoints/5/state", "runs/x/checkpoints/1", "checkpoints/2"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} would be committed"
