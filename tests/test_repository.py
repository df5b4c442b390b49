"""What the repository may hold: results and their small records, never checkpoints or large binaries (a submission
that carries them is too large to land, and checkpoints stay on the machine that trained)."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LARGEST_FILE_MB = 5


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.stdout.decode().split("\0") if p]


def test_no_checkpoint_or_large_file_is_tracked():
    files = tracked_files()
    assert files, "git ls-files listed nothing"
    assert [f for f in files if "checkpoints" in Path(f).parts] == []
    large = [(f, (ROOT / f).stat().st_size) for f in files if (ROOT / f).is_file()
             and (ROOT / f).stat().st_size > LARGEST_FILE_MB * 2 ** 20]
    assert large == [], f"files over {LARGEST_FILE_MB} MiB are tracked: {large}"


def test_checkpoints_are_ignored_at_any_depth():
    tracked_files()  # skips outside a git checkout
    for path in ("docs/results/a/b/runs/c/checkpoints/5/state", "runs/x/checkpoints/1", "checkpoints/2"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, f"{path} would be committed"
