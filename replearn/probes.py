"""Linear probes: how much of a target a representation carries (host-side analysis with scikit-learn), and how much
of a target a prediction explains as it is (:func:`explained`) or up to an affine map (:func:`affine_explained`)."""
from __future__ import annotations

import numpy as np


ALPHAS = tuple(float(a) for a in np.logspace(-2, 4, 13))


def ridge_probe_r2(train_x, train_y, test_x, test_y, alpha: float | None = 1.0, groups=None) -> float:
    """R^2 on held-out data of a ridge regression from features ``x [N, F]`` to targets ``y [N, K]``.

    Features and targets are standardised with the training statistics (target dimensions constant on the
    training set are dropped), and the score is pooled over target dimensions: 1 - sum SSE / sum SST on the
    test set, in standardised units. 1 is a perfect linear read-out, 0 no better than the test mean. Pooling
    keeps a dimension that happens to be nearly constant on the test episodes (a fallen walker's joint) from
    dominating, as a per-dimension average would. Returns NaN if ``y`` has no non-constant dimension (e.g. the
    distractor state of a noiseless env).

    ``alpha=None`` picks the ridge strength from :data:`ALPHAS` by leave-one-group-out cross-validation on
    the training set (``groups``: e.g. the episode of every row, so that time-correlated rows of one episode
    never sit on both sides of a fold).
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
    features, test_features = (train_x - mu_x) / sd_x, (test_x - mu_x) / sd_x
    if alpha is None:
        if groups is None or len(np.unique(groups)) < 2:
            raise ValueError("ridge_probe_r2: alpha=None needs groups with at least two distinct values")
        groups = np.asarray(groups)
        scores = []
        for a in ALPHAS:
            sse = sst = 0.0
            for g in np.unique(groups):
                held = groups == g
                fold = Ridge(alpha=a).fit(features[~held], target[~held])
                sse += np.square(target[held] - fold.predict(features[held])).sum()
                sst += np.square(target[held] - target[held].mean(0)).sum()
            scores.append(1.0 - sse / max(sst, 1e-12))
        alpha = ALPHAS[int(np.argmax(scores))]
    pred = Ridge(alpha=alpha).fit(features, target).predict(test_features)
    sst = np.square(test_target - test_target.mean(0)).sum()
    return float(1.0 - np.square(test_target - pred).sum() / max(sst, 1e-12))


def explained(target: np.ndarray, prediction: np.ndarray) -> float:
    """R^2 of ``prediction`` as it is (no fitting): 1 - (squared error) / (variance of ``target``) summed over
    steps; 1 is exact, 0 no better than the mean, negative worse."""
    target, prediction = np.asarray(target, np.float64), np.asarray(prediction, np.float64)
    return float(1.0 - np.sum((target - prediction) ** 2) / np.sum((target - target.mean()) ** 2))


def affine_explained(target: np.ndarray, prediction: np.ndarray) -> float:
    """R^2 of the least-squares affine map of ``prediction`` onto ``target`` (their squared correlation), negated
    where the map's slope is negative: in [-1, 1], 0 for a constant ``prediction``. What ``prediction`` explains up
    to a positive scale and a constant; negative where it falls as ``target`` rises (a policy climbing it would
    go the wrong way)."""
    target, prediction = np.asarray(target, np.float64), np.asarray(prediction, np.float64)
    t, p = target - target.mean(), prediction - prediction.mean()
    denominator = np.sum(t * t) * np.sum(p * p)
    covariance = np.sum(t * p)
    return float(np.sign(covariance) * covariance ** 2 / denominator) if denominator > 0 else 0.0
