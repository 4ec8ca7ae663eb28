"""RQ-KMeans: residual k-means over item embeddings -> semantic IDs (one code per level).

Level 0 clusters the embeddings; level l clusters what is left after subtracting the chosen
centroids of levels 0..l-1. Items that are close in embedding space therefore share SID
prefixes, which is what lets a generative recommender generalise across items.

Collision rule (``dedupe=True``, the default): see :mod:`.dedupe` — colliding items are moved to
the nearest *unused* last-level code under their prefix, or, when the prefix is full, to the
nearest unused pair of the last two codes; SIDs stay L levels long, and items that still share
a SID (every pair taken) are counted in ``stats.colliding_items``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from widebeam.services.catalog.sids.dedupe import dedupe_last_level
from widebeam.services.catalog.sids.kmeans import kmeans, nearest

DEFAULT_MAX_FIT_POINTS = 100_000


@dataclass(frozen=True)
class SidStats:
    num_items: int
    codebook_sizes: tuple[int, ...]
    codes_used: tuple[int, ...]  # distinct codes per level (after dedupe)
    energy: float  # mean squared norm of the embeddings: the error of a zero-level code
    recon_mse: tuple[float, ...]  # mean squared residual after each level, before dedupe
    final_mse: float  # mean squared residual of the returned codes (dedupe moves a few items)
    colliding_items_before: int  # items sharing their SID with another item, before dedupe
    reassigned: int  # items moved by dedupe
    colliding_items: int  # items still sharing their SID (a prefix ran out of codes)
    unique_sids: int

    def summary(self) -> str:
        levels = " × ".join(str(k) for k in self.codebook_sizes)
        mse = ", ".join(f"{m:.4g}" for m in self.recon_mse)
        return (
            f"{self.num_items} items, {levels} codes: {self.unique_sids} distinct SIDs; "
            f"codes used per level {list(self.codes_used)}; residual MSE per level [{mse}] "
            f"(embedding energy {self.energy:.4g}); {self.colliding_items_before} colliding "
            f"before dedupe, {self.reassigned} reassigned, {self.colliding_items} still sharing"
        )


@dataclass(frozen=True)
class SidAssignment:
    codes: np.ndarray  # [N, L] int64
    codebooks: tuple[np.ndarray, ...]  # L × [K_l, D] float32
    stats: SidStats


def build_sids(
    embeddings: np.ndarray,  # [N, D] float
    codebook_sizes: Sequence[int] = (64, 64, 64),
    seed: int = 0,
    *,
    iters: int = 15,
    max_fit_points: int = DEFAULT_MAX_FIT_POINTS,
    dedupe: bool = True,
) -> SidAssignment:
    """Fit one codebook per level and assign every item its SID (deterministic given ``seed``).

    Codebooks are fitted on at most ``max_fit_points`` items sampled with the seed (k-means
    quality saturates long before millions of points); every item is then encoded.
    """
    x = _check_embeddings(embeddings)
    sizes = tuple(int(k) for k in codebook_sizes)
    if not sizes or any(k < 1 for k in sizes):
        raise ValueError(f"codebook sizes must be a non-empty list of positive ints, got {sizes}")
    if max_fit_points < 1:
        raise ValueError(f"max_fit_points must be positive, got {max_fit_points}")
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    fit_rows = np.sort(rng.choice(n, max_fit_points, replace=False)) if n > max_fit_points else None
    residual = x.copy()
    codes = np.empty((n, len(sizes)), dtype=np.int64)
    codebooks: list[np.ndarray] = []
    mse: list[float] = []
    pair_input: np.ndarray | None = None  # [N, D]: input of level L-2, for the dedupe
    for level, k in enumerate(sizes):
        if dedupe and level == len(sizes) - 2:
            pair_input = residual.copy()
        fit = residual if fit_rows is None else residual[fit_rows]
        centroids = kmeans(fit, k, rng, iters=iters)  # [k, D]
        codes[:, level], dist = nearest(residual, centroids)
        residual -= centroids[codes[:, level]]
        codebooks.append(centroids)
        mse.append(float(dist.mean()))
    before = _colliding(codes)
    reassigned = 0
    if dedupe and len(sizes) > 0:
        # residual + last centroid = what the last level quantised
        last_input = residual + codebooks[-1][codes[:, -1]]  # [N, D]
        pair_codebook = codebooks[-2] if len(codebooks) >= 2 else None
        reassigned = dedupe_last_level(codes, last_input, codebooks[-1], pair_input, pair_codebook)
    final = x - sum(cb[codes[:, lvl]] for lvl, cb in enumerate(codebooks))  # [N, D]
    stats = SidStats(
        num_items=n,
        codebook_sizes=sizes,
        codes_used=tuple(len(np.unique(codes[:, lvl])) for lvl in range(len(sizes))),
        energy=float(np.einsum("nd,nd->n", x, x).mean()),
        recon_mse=tuple(mse),
        final_mse=float(np.einsum("nd,nd->n", final, final).mean()),
        colliding_items_before=before,
        reassigned=reassigned,
        colliding_items=_colliding(codes),
        unique_sids=len(np.unique(codes, axis=0)),
    )
    return SidAssignment(codes, tuple(codebooks), stats)


def encode(
    embeddings: np.ndarray,  # [N, D] float
    codebooks: Sequence[np.ndarray],  # L × [K_l, D]
) -> np.ndarray:  # [N, L] int64
    """SIDs of (new) items under fitted codebooks: greedy residual assignment, no dedupe."""
    x = _check_embeddings(embeddings)
    residual = x.copy()
    codes = np.empty((x.shape[0], len(codebooks)), dtype=np.int64)
    for level, cb in enumerate(codebooks):
        if cb.ndim != 2 or cb.shape[1] != x.shape[1]:
            raise ValueError(f"codebook {level} has shape {cb.shape}; need [K, {x.shape[1]}]")
        codes[:, level], _ = nearest(residual, cb.astype(np.float32, copy=False))
        residual -= cb[codes[:, level]]
    return codes


def _check_embeddings(embeddings: np.ndarray) -> np.ndarray:  # [N, D] float32, C-contiguous
    x = np.asarray(embeddings)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D [items, dim] array, got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"embeddings are empty (shape {x.shape})")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"embeddings must be numeric, got dtype {x.dtype}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)[:5].tolist()
        raise ValueError(
            f"embeddings have NaN or infinite values in {bad.sum()} row(s), e.g. {rows}"
        )
    return x


def _colliding(codes: np.ndarray) -> int:  # codes [N, L] int64
    """Items whose full SID is shared with at least one other item."""
    _, inverse, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    return int((counts[inverse.reshape(-1)] > 1).sum())
