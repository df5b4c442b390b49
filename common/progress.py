"""Progress bars: tqdm's where tqdm is installed, else a plain one, so the training loops run on machines that have
only JAX, Flax, Optax, Orbax and NumPy (an accelerator image with no network).

    with progress_bar(total=1000, desc="training", unit="update") as bar:
        bar.update(100)
        bar.set_postfix(loss="0.31")
"""
from __future__ import annotations

import sys
import time


def progress_bar(**kwargs):
    """``tqdm.auto.tqdm(**kwargs)`` if tqdm is installed, else a :class:`PlainBar` with the same arguments."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return PlainBar(**kwargs)
    return tqdm(**kwargs)


class PlainBar:
    """What the suite uses of tqdm's bar, printed as a line to stderr when closed and on updates at most every 30
    seconds (or ``mininterval``, if longer): ``desc: n/total unit [postfix]``."""

    def __init__(self, total: int | None = None, initial: int = 0, desc: str = "", unit: str = "it",
                 disable: bool = False, mininterval: float = 30.0, **_):
        self.total, self.n, self.desc, self.unit, self.disable = total, initial, desc, unit, disable
        self.mininterval, self.postfix, self._last = max(float(mininterval), 30.0), "", -float("inf")

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self._last >= self.mininterval:
            self._print()

    def set_postfix(self, ordered_dict: dict | None = None, **kwargs) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "") -> None:
        self.postfix = s

    def _print(self) -> None:
        self._last = time.monotonic()
        if not self.disable:
            total = "" if self.total is None else f"/{self.total}"
            postfix = f" [{self.postfix}]" if self.postfix else ""
            print(f"{self.desc}: {self.n}{total} {self.unit}{postfix}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._print()

    def __enter__(self) -> "PlainBar":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
