"""Linear probes: how much of a target a representation carries (host-side analysis with scikit-learn)."""
from __future__ import annotations

import numpy as np


def ridge_probe_r2(train_x, train_y, test_x, test_y, alpha: float = 1.0) -> float:
    """R^2 on held-out data of a ridge regression from features ``x [N, F]`` to targets ``y [N, K]``.

    Features and targets are standardised with the training statistics (target dimensions constant on the
    training set are dropped), and the score is pooled over target dimensions: 1 - sum SSE / sum SST on the
    test set, in standardised units. 1 is a perfect linear read-out, 0 no better than the test mean. Pooling
    keeps a dimension that happens to be nearly constant on the test episodes (a fallen walker's joint) from
    dominating, as a per-dimension average would. Returns NaN if ``y`` has no non-constant dimension (e.g. the
    distractor state of a noiseless env).
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
    mu_y, sd_y = train_y.mean(0), train_y.std(0)
    keep = sd_y > 1e-6
    if not keep.any():
        return float("nan")
    target, test_target = (train_y[:, keep] - mu_y[keep]) / sd_y[keep], (test_y[:, keep] - mu_y[keep]) / sd_y[keep]
    model = Ridge(alpha=alpha).fit((train_x - mu_x) / sd_x, target)
    pred = model.predict((test_x - mu_x) / sd_x)
    sst = np.square(test_target - test_target.mean(0)).sum()
    return float(1.0 - np.square(test_target - pred).sum() / max(sst, 1e-12))
