"""Representation-alignment metrics (Platonic Representation Hypothesis appendix; dissertation E.1-E.2).

Every metric compares two feature sets ``a: [n, d_a]`` and ``b: [n, d_b]`` whose rows describe the same
n samples, and returns a scalar in [0, 1] (1 = aligned; CKA variants can dip slightly below 0 when
unbiased). Features are L2-normalised by default (``normalize=True``), as in the paper's pipeline.

Nearest neighbours (``knn_indices``): by cosine similarity for normalised features, else by Euclidean
distance; a sample is never its own neighbour. They are computed in row chunks with ``lax.top_k`` (no
full argsort, memory O(chunk * n)), so the k-NN metrics scale to tens of thousands of samples. Ties are
broken towards the lower sample index, deterministically. Kernel metrics (RBF CKA, CKNNA) build n x n
matrices; linear CKA works in feature space (memory O(n d + d^2)).

========================  ===========================================================================
mutual_knn                mean_i |N_a(i) & N_b(i)| / k (``knn_overlap`` from given neighbour lists,
                          ``knn_from_distances`` for neighbours under a given distance matrix,
                          ``knn_overlap_matrix`` between every two of many neighbour lists)
cycle_knn                 mean_i mean_{j in N_a(i)} 1[i in N_b(j)]: does the neighbour of i in a
                          count i among its own neighbours in b
lcs_knn / edit_knn        ordered neighbour lists: longest common subsequence / k, and
                          1 - Levenshtein distance / k
cka                       HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), linear or RBF kernel, biased HSIC
                          (tr(KHLH) / (n-1)^2) or unbiased HSIC (Song et al. 2012)
kernel_cka                CKA of two given n x n kernel matrices
cknna                     CKA restricted to mutual k-NN pairs, on U-centred kernels (the unbiased
                          HSIC), so cknna with k = n - 1 equals unbiased CKA
svcca                     SVD-reduce each set to the top directions keeping 99% of the variance,
                          then the mean canonical correlation
========================  ===========================================================================
"""
from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np


def unit_rows(x: jax.Array) -> jax.Array:
    """Every row of ``x`` ``[n, d]`` scaled to unit length (a zero row stays zero): the ``normalize`` of the
    metrics below, for features compared by their direction (the PRH paper's setting)."""
    x = jnp.asarray(x)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _prepare(a: jax.Array, b: jax.Array, normalize: bool) -> tuple[jax.Array, jax.Array]:
    a, b = jnp.asarray(a), jnp.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if x.ndim != 2:
            raise ValueError(f"features {name} must have shape [n, d], got {x.shape}")
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"features {name} must be floating point, got dtype {x.dtype}")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"a and b must describe the same samples: got {a.shape[0]} and {b.shape[0]} rows")
    if a.shape[0] < 4:
        raise ValueError(f"need at least 4 samples, got {a.shape[0]}")
    a, b = a.astype(jnp.promote_types(a.dtype, jnp.float32)), b.astype(jnp.promote_types(b.dtype, jnp.float32))
    if normalize:
        a, b = unit_rows(a), unit_rows(b)
    return a, b


def _check_k(k: int, n: int) -> None:
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be in [1, n - 1] = [1, {n - 1}], got {k}")


def knn_indices(x: jax.Array, k: int, normalized: bool = True, chunk: int = 1024) -> jax.Array:
    """Indices ``[n, k]`` of each row's k nearest other rows, nearest first (ties: lower index first)."""
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"knn_indices: x must have shape [n, d], got {x.shape}")
    n = x.shape[0]
    _check_k(k, n)
    chunk = min(chunk, n)
    pad = (-n) % chunk
    rows = jnp.pad(x, ((0, pad), (0, 0))).reshape(-1, chunk, x.shape[1])
    row_ids = jnp.arange(n + pad).reshape(-1, chunk)
    sq_norm = jnp.sum(jnp.square(x), axis=1)

    def block(args):
        xs, ids = args
        score = xs @ x.T if normalized else 2 * xs @ x.T - sq_norm[None, :]  # -||x_i - x_j||^2 + const_i
        score = jnp.where(ids[:, None] == jnp.arange(n)[None, :], -jnp.inf, score)
        return jax.lax.top_k(score, k)[1]

    return jax.lax.map(block, (rows, row_ids)).reshape(-1, k)[:n]


def knn_from_distances(distances: jax.Array, k: int) -> jax.Array:
    """Indices ``[n, k]`` of each row's k nearest other rows under a given ``[n, n]`` distance matrix (e.g. the
    true shortest-path distances of a maze), nearest first, ties towards the lower index; never the row itself."""
    d = jnp.asarray(distances)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"knn_from_distances: distances must be a square [n, n] matrix, got {d.shape}")
    n = d.shape[0]
    _check_k(k, n)
    return jax.lax.top_k(jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, -d), k)[1]


def knn_overlap(neighbours_a: jax.Array, neighbours_b: jax.Array) -> jax.Array:
    """mean_i |N_a(i) & N_b(i)| / k for neighbour index lists ``[n, k]`` (from :func:`knn_indices` or
    :func:`knn_from_distances`): mutual k-NN from precomputed neighbours."""
    na, nb = jnp.asarray(neighbours_a), jnp.asarray(neighbours_b)
    if na.ndim != 2 or na.shape != nb.shape:
        raise ValueError(f"knn_overlap: neighbour lists must both have shape [n, k], got {na.shape} and {nb.shape}")
    return jnp.mean(jnp.sum(na[:, :, None] == nb[:, None, :], axis=(1, 2)) / na.shape[1])


def knn_overlap_matrix(neighbours: list) -> np.ndarray:
    """:func:`knn_overlap` between every two of ``neighbours`` (neighbour lists ``[n, k]`` of the same n samples, e.g.
    from :func:`knn_indices`), ones on the diagonal: the mutual k-NN matrix of many feature sets, each set's
    neighbours found once."""
    if not neighbours:
        raise ValueError("knn_overlap_matrix: neighbours must hold at least one [n, k] neighbour list, got none")
    overlap = jax.jit(knn_overlap)
    matrix = np.eye(len(neighbours))
    for i in range(len(neighbours)):
        for j in range(i + 1, len(neighbours)):
            matrix[i, j] = matrix[j, i] = float(overlap(neighbours[i], neighbours[j]))
    return matrix


def _knn_pair(a, b, k, normalize):
    a, b = _prepare(a, b, normalize)
    _check_k(k, a.shape[0])
    return knn_indices(a, k, normalize), knn_indices(b, k, normalize)


def mutual_knn(a: jax.Array, b: jax.Array, k: int = 10, normalize: bool = True) -> jax.Array:
    """Mean overlap of the k-NN sets, |N_a(i) & N_b(i)| / k (PRH eq. for m_NN). Independent random
    features give about k / (n - 1)."""
    return knn_overlap(*_knn_pair(a, b, k, normalize))


def cycle_knn(a: jax.Array, b: jax.Array, k: int = 10, normalize: bool = True) -> jax.Array:
    """mean_i mean_{j in N_a(i)} 1[i in N_b(j)]."""
    na, nb = _knn_pair(a, b, k, normalize)
    i = jnp.arange(na.shape[0])
    return jnp.mean(jnp.any(nb[na] == i[:, None, None], axis=-1))


def _lcs_length(s: jax.Array, t: jax.Array) -> jax.Array:
    """Longest common subsequence length of two int sequences of length k (dynamic programming)."""
    k = s.shape[0]

    def row(prev, s_i):
        def cell(left, j):
            value = jnp.where(s_i == t[j], prev[j] + 1, jnp.maximum(prev[j + 1], left))
            return value, value

        _, cur = jax.lax.scan(cell, jnp.zeros((), jnp.int32), jnp.arange(k))
        cur = jnp.concatenate([jnp.zeros(1, jnp.int32), cur])
        return cur, None

    last, _ = jax.lax.scan(row, jnp.zeros(k + 1, jnp.int32), s)
    return last[-1]


def _edit_distance(s: jax.Array, t: jax.Array) -> jax.Array:
    """Levenshtein distance (insert, delete, substitute: cost 1 each) of two int sequences of length k."""
    k = s.shape[0]

    def row(prev, inputs):
        i, s_i = inputs

        def cell(left, j):
            value = jnp.minimum(jnp.minimum(prev[j + 1] + 1, left + 1), prev[j] + (s_i != t[j]))
            return value, value

        _, cur = jax.lax.scan(cell, i + 1, jnp.arange(k))
        return jnp.concatenate([(i + 1)[None], cur]), None

    first = jnp.arange(k + 1, dtype=jnp.int32)
    last, _ = jax.lax.scan(row, first, (jnp.arange(k, dtype=jnp.int32), s))
    return last[-1]


def lcs_knn(a: jax.Array, b: jax.Array, k: int = 10, normalize: bool = True) -> jax.Array:
    """mean_i LCS(ordered N_a(i), ordered N_b(i)) / k."""
    na, nb = _knn_pair(a, b, k, normalize)
    return jnp.mean(jax.vmap(_lcs_length)(na, nb) / k)


def edit_knn(a: jax.Array, b: jax.Array, k: int = 10, normalize: bool = True) -> jax.Array:
    """mean_i (1 - Levenshtein(ordered N_a(i), ordered N_b(i)) / k); k is the maximum edit distance."""
    na, nb = _knn_pair(a, b, k, normalize)
    return jnp.mean(1 - jax.vmap(_edit_distance)(na, nb) / k)


# ------------------------------------------------------------------------------------------- kernels

def _center_features(x: jax.Array) -> jax.Array:
    """Subtract the column means, twice (the second pass removes the float32 rounding left by the first).

    Every kernel statistic below is translation invariant in exact arithmetic -- centred and U-centred linear
    kernels ignore a constant added to every feature vector, and RBF kernels only see differences -- but
    in float32 a large common offset makes ``x x^T`` or ``|x_i|^2 + |x_j|^2 - 2 x_i.x_j`` cancel
    catastrophically (offset 30 on unit-variance features already gives NaN). Centring first is exact
    in exact arithmetic and keeps every product at the scale of the features' spread."""
    x = x - x.mean(0, keepdims=True)
    return x - x.mean(0, keepdims=True)


def _rbf_kernel(x: jax.Array, sigma: float) -> jax.Array:
    """exp(-||x_i - x_j||^2 / (2 s^2)) with s = sigma * median off-diagonal distance."""
    x = _center_features(x)
    sq = jnp.maximum(jnp.sum(x * x, 1)[:, None] + jnp.sum(x * x, 1)[None, :] - 2 * x @ x.T, 0.0)
    n = x.shape[0]
    off = sq[~np.eye(n, dtype=bool)]  # a NumPy mask: its entries are known when tracing, so this jits
    bandwidth = sigma * jnp.sqrt(jnp.median(off))
    return jnp.exp(-sq / (2 * jnp.square(bandwidth)))


def _center(k: jax.Array) -> jax.Array:
    return k - k.mean(0, keepdims=True) - k.mean(1, keepdims=True) + k.mean()


def _u_center(k: jax.Array) -> jax.Array:
    """U-centring (Szekely & Rizzo 2014): <U(K), U(L)> / (n (n - 3)) is the unbiased HSIC (Song et al.)."""
    n = k.shape[0]
    k = k * (1 - jnp.eye(n, dtype=k.dtype))
    rows = k.sum(1, keepdims=True) / (n - 2)
    cols = k.sum(0, keepdims=True) / (n - 2)
    total = k.sum() / ((n - 1) * (n - 2))
    return (k - rows - cols + total) * (1 - jnp.eye(n, dtype=k.dtype))


def _linear_cka_features(a: jax.Array, b: jax.Array, unbiased: bool) -> jax.Array:
    """Linear CKA from features without n x n matrices (features centred first: see _center_features)."""
    a, b = _center_features(a), _center_features(b)
    if not unbiased:
        hsic = lambda x, y: jnp.sum(jnp.square(x.T @ y))  # noqa: E731  (the (n-1)^2 cancels)
        return hsic(a, b) / jnp.sqrt(hsic(a, a) * hsic(b, b))
    n = a.shape[0]

    def hsic(x, y):
        dx, dy = jnp.sum(x * x, 1), jnp.sum(y * y, 1)          # diagonals of K and L
        trace = jnp.sum(jnp.square(x.T @ y)) - jnp.sum(dx * dy)  # tr(K~ L~)
        kx = x @ x.sum(0) - dx                                  # K~ 1
        ly = y @ y.sum(0) - dy                                  # L~ 1
        return trace + kx.sum() * ly.sum() / ((n - 1) * (n - 2)) - 2 * jnp.dot(kx, ly) / (n - 2)

    return hsic(a, b) / jnp.sqrt(hsic(a, a) * hsic(b, b))


def cka(a: jax.Array, b: jax.Array, kernel: Literal["linear", "rbf"] = "linear", unbiased: bool = False,
        sigma: float = 1.0, normalize: bool = True) -> jax.Array:
    """Centered kernel alignment (Kornblith et al. 2019). ``sigma``: RBF bandwidth as a multiple of the
    median pairwise distance. Linear CKA is invariant to orthogonal transforms, isotropic scaling and
    translation of either feature set (with ``normalize=False``)."""
    a, b = _prepare(a, b, normalize)
    if kernel == "linear":
        return _linear_cka_features(a, b, unbiased)
    if kernel != "rbf":
        raise ValueError(f"kernel must be 'linear' or 'rbf', got {kernel!r}")
    ka, kb = _rbf_kernel(a, sigma), _rbf_kernel(b, sigma)
    center = _u_center if unbiased else _center
    ka, kb = center(ka), center(kb)
    return jnp.sum(ka * kb) / jnp.sqrt(jnp.sum(ka * ka) * jnp.sum(kb * kb))


def kernel_cka(kernel_a: jax.Array, kernel_b: jax.Array) -> jax.Array:
    """CKA of two given ``[n, n]`` kernel (Gram) matrices, tr(K H L H) / sqrt(tr(K H K H) tr(L H L H)) (the
    biased HSIC of :func:`cka`): for kernels with no feature form, e.g. the classical-MDS kernel
    -1/2 H D^2 H of a shortest-path distance matrix D. ``kernel_cka(a a^T, b b^T)`` equals linear :func:`cka`
    of ``a`` and ``b`` (``normalize=False``)."""
    ka, kb = jnp.asarray(kernel_a, jnp.float32), jnp.asarray(kernel_b, jnp.float32)
    if ka.ndim != 2 or ka.shape[0] != ka.shape[1] or ka.shape != kb.shape:
        raise ValueError(f"kernel_cka: kernels must be square and of one shape, got {ka.shape} and {kb.shape}")
    ka, kb = _center(ka), _center(kb)
    return jnp.sum(ka * kb) / jnp.sqrt(jnp.sum(ka * ka) * jnp.sum(kb * kb))


def cknna(a: jax.Array, b: jax.Array, k: int = 10, normalize: bool = True) -> jax.Array:
    """Centered kernel nearest-neighbour alignment (PRH appendix):

        Align(K, L) = sum_{i != j} alpha_ij U(K)_ij U(L)_ij,  alpha_ij = 1[j in N_K(i) and j in N_L(i)],
        CKNNA = Align(K, L) / sqrt(Align(K, K) Align(L, L)),

    with linear kernels, U the U-centring of the unbiased HSIC; k = n - 1 gives unbiased linear CKA.
    """
    a, b = _prepare(a, b, normalize)
    n = a.shape[0]
    _check_k(k, n)
    na, nb = knn_indices(a, k, normalize), knn_indices(b, k, normalize)
    mask_a = jnp.zeros((n, n), bool).at[jnp.arange(n)[:, None], na].set(True)
    mask_b = jnp.zeros((n, n), bool).at[jnp.arange(n)[:, None], nb].set(True)
    ca, cb = _center_features(a), _center_features(b)  # U-centring ignores the offset; float32 does not
    ka, kb = _u_center(ca @ ca.T), _u_center(cb @ cb.T)
    align = lambda x, y, mask: jnp.sum(jnp.where(mask, x * y, 0.0))  # noqa: E731
    return align(ka, kb, mask_a & mask_b) / jnp.sqrt(align(ka, ka, mask_a) * align(kb, kb, mask_b))


def svcca(a: jax.Array, b: jax.Array, keep_variance: float = 0.99, normalize: bool = True) -> jax.Array:
    """SVCCA (Raghu et al. 2017): keep the top singular directions of each centred set that explain
    ``keep_variance`` of its variance, then average the canonical correlations between the two subspaces
    (the singular values of Q_a^T Q_b for orthonormal bases Q), over min(r_a, r_b) of them."""
    if not 0 < keep_variance <= 1:
        raise ValueError(f"keep_variance must be in (0, 1], got {keep_variance}")
    a, b = _prepare(a, b, normalize)

    def basis(x):
        u, s, _ = jnp.linalg.svd(x - x.mean(0), full_matrices=False)
        explained = jnp.cumsum(s ** 2) / jnp.sum(s ** 2)
        keep = jnp.concatenate([jnp.array([True]), explained[:-1] < keep_variance - 1e-7])
        return u * keep[None, :], keep.sum()

    qa, ra = basis(a)
    qb, rb = basis(b)
    corr = jnp.linalg.svd(qa.T @ qb, compute_uv=False)  # sorted descending; zeros for dropped columns
    r = jnp.minimum(ra, rb)
    return jnp.sum(jnp.where(jnp.arange(corr.shape[0]) < r, corr, 0.0)) / r
