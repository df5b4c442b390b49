"""Whether a QRL run has settled: its convergence signals in the offline loop's metrics rows.

QRL's critic trains under a Lagrange-constrained local constraint (QRL, section 4): the multiplier rises while the
mean squared one-step violation is above eps^2 and stops once it is there, and the mean learned distance to the
goals falls as the critic spreads states apart. A run whose three signals still move over its last updates is a
snapshot of a moving critic; :func:`convergence` says which.

    from platonic_rl.training.signals import convergence
    convergence(history)  # history: the rows train_offline returns (or a run directory's metrics.jsonl)
"""
from __future__ import annotations

import numpy as np

SIGNALS = ("lagrange_multiplier", "violation", "mean_goal_distance")
"""The signals, each logged per critic as ``critic<i>/<signal>`` by the QRL agents' ``update``."""

FLAT = 0.05
"""A signal is flat when its relative change over the window is under this."""


def signal_value(row: dict, signal: str) -> float:
    """A metrics row's ``signal`` (one of :data:`SIGNALS`), the mean over the critics' ``critic<i>/<signal>``."""
    values = [value for key, value in row.items() if key.endswith("/" + signal)]
    if not values:
        raise KeyError(f"no critic<i>/{signal} in the metrics row (keys: {sorted(row)})")
    return float(np.mean(values))


def convergence(history: list[dict], tail: float = 0.2) -> dict:
    """For each signal (mean over critics): its first and last logged value, and its relative change over the
    last ``tail`` of the logged updates -- the least-squares line's rise across that window over the
    window's mean magnitude. ``flat`` when every change is under :data:`FLAT`. ``{}`` for an empty history or
    one without QRL's signals."""
    if not 0 < tail <= 1:
        raise ValueError(f"tail must be in (0, 1], got {tail}")
    out = {}
    if not history:
        return out
    steps = np.array([row["step"] for row in history], float)
    window = steps >= steps[-1] - tail * steps[-1]
    for signal in SIGNALS:
        if not any(key.endswith("/" + signal) for key in history[0]):
            continue
        values = np.array([signal_value(row, signal) for row in history])
        x, y = steps[window], values[window]
        slope = np.polyfit(x, y, 1)[0] if len(x) > 1 else 0.0
        change = float(slope * (x[-1] - x[0]) / max(np.abs(y).mean(), 1e-12))
        out[signal] = dict(first=float(values[0]), last=float(values[-1]), tail_change=change)
    if out:
        out["flat"] = bool(all(abs(v["tail_change"]) < FLAT for k, v in out.items() if k in SIGNALS))
    return out


def describe(signals: dict, tail: float = 0.2) -> str:
    """One line: ``flat`` or ``still moving``, with each signal's change over the window in percent."""
    if not signals:
        return "no convergence signals"
    names = dict(lagrange_multiplier="multiplier", violation="violation", mean_goal_distance="distance")
    changes = ", ".join(f"{names[s]} {round(100 * signals[s]['tail_change'], 1) + 0.0:+.1f}%"  # no "-0.0"
                        for s in SIGNALS if s in signals)
    return f"{'flat' if signals['flat'] else 'still moving'} over the last {tail:.0%} of updates ({changes})"
