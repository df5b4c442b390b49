"""Making envs whose libraries leave files in the system's temporary directory.

gymnasium-robotics' maze envs (PointMaze, AntMaze) and OGBench's locomotion mazes write their model's XML into the
temporary directory when made and never delete it: one file per env made. Made inside
:func:`private_temporary_directory`, they leave nothing behind.
"""
from __future__ import annotations

import contextlib
import tempfile


@contextlib.contextmanager
def private_temporary_directory(prefix: str = "platonic_rl_"):
    """Within the block, ``tempfile``'s directory is a fresh private one, removed afterwards with all written there;
    the previous one is restored, also on an error. Not thread-safe (``tempfile.tempdir`` is global)."""
    previous = tempfile.tempdir
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        tempfile.tempdir = scratch
        try:
            yield scratch
        finally:
            tempfile.tempdir = previous
