"""Vectorised k-means (k-means++ init, Lloyd iterations) in numpy, the building block of RQ-KMeans.

Distances use ||x||² - 2·x·c + ||c||² (one matmul per chunk), computed in chunks so memory stays
bounded by ``chunk × k`` whatever the number of points.
"""

from __future__ import annotations

import numpy as np

CHUNK_ROWS = 1 << 15  # rows per distance block: 32k × 8192 codes × 4 B = 1 GiB at worst


def nearest(
    x: np.ndarray,  # [N, D] float32
    centroids: np.ndarray,  # [K, D] float32
) -> tuple[np.ndarray, np.ndarray]:  # ([N] int64 index, [N] float32 squared distance)
    """Index of and squared distance to the nearest centroid (ties: lowest index)."""
    n = x.shape[0]
    index = np.empty(n, dtype=np.int64)
    dist = np.empty(n, dtype=np.float32)
    c_sq = np.einsum("kd,kd->k", centroids, centroids)  # [K]
    for start in range(0, n, CHUNK_ROWS):
        block = x[start : start + CHUNK_ROWS]  # [B, D]
        d = c_sq[None, :] - 2.0 * (block @ centroids.T)  # [B, K], missing the constant ||x||²
        best = d.argmin(axis=1)
        index[start : start + len(block)] = best
        x_sq = np.einsum("bd,bd->b", block, block)
        # Clamp: cancellation in float32 can make an exact hit slightly negative.
        dist[start : start + len(block)] = np.maximum(d[np.arange(len(block)), best] + x_sq, 0.0)
    return index, dist


def kmeans_pp_init(
    x: np.ndarray,  # [N, D] float32
    k: int,
    rng: np.random.Generator,
) -> np.ndarray:  # [k, D] float32
    """k-means++ seeding (one candidate per round). With fewer distinct points than k, the
    leftover centroids repeat points; they stay empty and are re-seeded by Lloyd if possible."""
    n = x.shape[0]
    centroids = np.empty((k, x.shape[1]), dtype=np.float32)
    centroids[0] = x[rng.integers(n)]
    closest = np.einsum("nd,nd->n", x - centroids[0], x - centroids[0])  # [N] float32
    for i in range(1, k):
        total = float(closest.sum())
        if total <= 0.0:  # every point coincides with a centroid already
            pick = int(rng.integers(n))
        else:
            pick = int(np.searchsorted(np.cumsum(closest, dtype=np.float64), rng.random() * total))
            pick = min(pick, n - 1)
        centroids[i] = x[pick]
        diff = x - centroids[i]
        np.minimum(closest, np.einsum("nd,nd->n", diff, diff), out=closest)
    return centroids


def kmeans(
    x: np.ndarray,  # [N, D] float32
    k: int,
    rng: np.random.Generator,
    iters: int = 15,
    tol: float = 1e-5,
) -> np.ndarray:  # [k, D] float32 centroids
    """k-means++ then at most ``iters`` Lloyd rounds; stops early when the mean squared error
    improves by less than ``tol`` (relative). Empty clusters are re-seeded on the points farthest
    from their centroid, so every code stays usable when there are enough distinct points."""
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"k-means needs a non-empty [N, D] array, got shape {x.shape}")
    centroids = kmeans_pp_init(x, k, rng)
    previous = np.inf
    for _ in range(iters):
        assign, dist = nearest(x, centroids)
        counts = np.bincount(assign, minlength=k)  # [k]
        sums = np.stack(
            [np.bincount(assign, weights=x[:, d], minlength=k) for d in range(x.shape[1])], axis=1
        )  # [k, D] float64: per-dimension bincount beats np.add.at by ~10×
        filled = counts > 0
        centroids[filled] = (sums[filled] / counts[filled, None]).astype(np.float32)
        empty = np.flatnonzero(~filled)
        if len(empty):
            far = np.argsort(-dist, kind="stable")[: len(empty)]
            centroids[empty[: len(far)]] = x[far]
        mse = float(dist.mean())
        if len(empty) == 0 and previous - mse <= tol * max(previous, 1e-30):
            break
        previous = mse
    return centroids
