"""Ranking metrics of one sample and their means, as FlashRec's and OpenOneRec's RecIF
evaluations define them (duplicates in the ranked list count once, at their first rank).

With ``top`` the first K distinct predictions and ``targets`` the relevant ids:
``hit@K`` = 1 if any of ``top`` is relevant; ``recall@K`` = |top ∩ targets| / |targets|;
``ndcg@K`` = sum over relevant ranks r of 1/log2(r+1), over the same sum for the first
min(K, |targets|) ranks; ``mrr@K`` = 1/r of the first relevant rank r, else 0. With one target
(a held-out item) recall equals hit, as in `widebeam demo build`'s evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

DEFAULT_KS = (1, 4, 8, 16, 32, 50, 128, 512)
METRICS = ("hit", "recall", "ndcg", "mrr")


def cutoffs(n: int, ks: Iterable[int] = DEFAULT_KS) -> tuple[int, ...]:
    """The Ks reported for ``n`` returned predictions: those <= n, and n itself."""
    return tuple(sorted({k for k in ks if 1 <= k <= n} | {n}))


def distinct(ranked: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ranked))


def sample_scores(
    ranked: Sequence[str], targets: Sequence[str], ks: Sequence[int]
) -> dict[str, list[float]]:
    """metric -> [value at each K of ``ks``] for one sample."""
    relevant = set(targets)
    order = distinct(ranked)
    first_hit = next((r for r, x in enumerate(order, 1) if x in relevant), None)
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for k in ks:
        top = order[:k]
        hits = [r for r, x in enumerate(top, 1) if x in relevant]
        ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(relevant)) + 1))
        out["hit"].append(1.0 if hits else 0.0)
        out["recall"].append(len(hits) / len(relevant) if relevant else 0.0)
        out["ndcg"].append(sum(1.0 / math.log2(r + 1) for r in hits) / ideal if ideal else 0.0)
        out["mrr"].append(1.0 / first_hit if first_hit is not None and first_hit <= k else 0.0)
    return out


def mean_scores(
    per_sample: Sequence[dict[str, list[float]]], ks: Sequence[int]
) -> dict[str, float]:
    """``"recall@10"``-style keys -> the mean over samples (0 when there are none)."""
    n = max(len(per_sample), 1)
    return {
        f"{m}@{k}": sum(s[m][i] for s in per_sample) / n for m in METRICS for i, k in enumerate(ks)
    }
