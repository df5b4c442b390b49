"""Linear probes: how much of a target a representation carries (host-side analysis with scikit-learn)."""
from __future__ import annotations

import numpy as np


def ridge_probe_r2(train_x, train_y, test_x, test_y, alpha: float = 1.0) -> float:
    """R^2 on held-out data of a ridge regression from features ``x [N, F]`` to targets ``y [N, K]``.

    Features and targets are standardised with the training statistics; the score is the mean over target
    dimensions of 1 - SSE / SST on the test set (dimensions constant on the test set are skipped), so 1 is
    a perfect linear read-out and 0 is no better than the training mean. Returns NaN if ``y`` has no
    non-constant dimension (e.g. the distractor state of a noiseless env).
    """
    from sklearn.linear_model import Ridge

    train_x, test_x = np.asarray(train_x, np.float64), np.asarray(test_x, np.float64)
    train_y, test_y = np.asarray(train_y, np.float64), np.asarray(test_y, np.float64)
    if train_y.ndim == 1:
        train_y, test_y = train_y[:, None], test_y[:, None]
    for name, a, b in (("x", train_x, test_x), ("y", train_y, test_y)):
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise ValueError(f"ridge_probe_r2: train_{name} and test_{name} must be [N, K] with the same K, got "
                             f"{a.shape} and {b.shape}")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("ridge_probe_r2: features and targets must have the same number of rows")
    if train_y.shape[1] == 0:
        return float("nan")
    mu_x, sd_x = train_x.mean(0), train_x.std(0) + 1e-8
    mu_y, sd_y = train_y.mean(0), train_y.std(0) + 1e-8
    model = Ridge(alpha=alpha).fit((train_x - mu_x) / sd_x, (train_y - mu_y) / sd_y)
    pred = model.predict((test_x - mu_x) / sd_x) * sd_y + mu_y
    sst = np.square(test_y - test_y.mean(0)).sum(0)
    keep = sst > 1e-12 * len(test_y)
    if not keep.any():
        return float("nan")
    sse = np.square(test_y - pred).sum(0)
    return float(np.mean(1.0 - sse[keep] / sst[keep]))
