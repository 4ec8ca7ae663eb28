"""Collision handling for RQ-KMeans SIDs: reassign at the last level (a documented dedupe).

Rule: group items by their first L-1 codes (the prefix). Within a prefix, every item whose full
SID is unique keeps it. Among items that share a full SID, the one whose last-level input is
closest to the shared codeword keeps it; the others, closest first (ties by item index), each
take the nearest last-level codeword that no item of the prefix uses yet.

Full prefixes (all K last-level codes used; residual k-means can crowd one prefix with dozens of
items): each item left over moves to the nearest unused pair (code_{L-2}, code_{L-1}) under its
first L-2 codes, "nearest" meaning the smallest reconstruction error of those two levels, among
the ``PAIR_CANDIDATES`` level L-2 codewords nearest to the item. Only if every such pair is taken
does an item keep its shared SID: the catalog format allows several items per SID (the engine
returns all of them), and ``stats.colliding_items`` reports how many.

Why not an extra disambiguation level: it would change the SID depth (and the model's vocabulary)
for a handful of items, while the nearest free code costs only a slightly larger residual.
"""

from __future__ import annotations

import numpy as np

PAIR_CANDIDATES = 64  # level L-2 codewords tried per item when its prefix is full


def dedupe_last_level(
    codes: np.ndarray,  # [N, L] int64, edited in place
    last_input: np.ndarray,  # [N, D] float32: what the last level quantised (its residual input)
    codebook: np.ndarray,  # [K, D] float32: the last level's codewords
    pair_input: np.ndarray | None = None,  # [N, D] float32: the input of level L-2 (L >= 2)
    pair_codebook: np.ndarray | None = None,  # [K2, D] float32: level L-2's codewords
) -> int:
    """Apply the rule above; returns how many items were moved."""
    depth = codes.shape[1]
    _, sid_of, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    colliding = np.flatnonzero(counts[sid_of.reshape(-1)] > 1)  # [M] item indices
    if len(colliding) == 0:
        return 0
    if depth == 1:  # no prefix to stay within: a single level has nowhere else to go
        pair_input = pair_codebook = None
    prefix_of = _group_ids(codes[:, : depth - 1])  # [N] int64: one id per distinct prefix
    own = codebook[codes[colliding, -1]]  # [M, D]
    own_dist = np.einsum("md,md->m", last_input[colliding] - own, last_input[colliding] - own)
    # Process prefix by prefix, each prefix's colliders closest-to-their-codeword first.
    order = np.lexsort((colliding, own_dist, prefix_of[colliding]))
    colliding = colliding[order]
    c_sq = np.einsum("kd,kd->k", codebook, codebook)  # [K]
    # Items of each prefix, for the codes it already uses.
    by_prefix = np.argsort(prefix_of, kind="stable")  # [N]
    bounds = np.searchsorted(prefix_of[by_prefix], np.arange(prefix_of.max() + 2))
    moved = 0
    used: set[int] = set()
    current_prefix = -1
    kept_sids: set[int] = set()  # full SIDs whose first (closest) member kept the code
    for item in colliding.tolist():
        prefix = int(prefix_of[item])
        if prefix != current_prefix:
            current_prefix = prefix
            used = set(codes[by_prefix[bounds[prefix] : bounds[prefix + 1]], -1].tolist())
        sid = int(sid_of[item])
        if sid not in kept_sids:
            kept_sids.add(sid)
            continue
        if len(used) == len(codebook):
            continue  # the prefix is full: the item keeps its shared SID
        # Only movers need distances to every codeword: [K], nearest first.
        d = c_sq - 2.0 * (codebook @ last_input[item])
        for code in np.argsort(d, kind="stable").tolist():
            if code not in used:
                codes[item, -1] = code
                used.add(code)
                moved += 1
                break
    return moved + _second_pass(codes, pair_input, pair_codebook, codebook)


def _second_pass(
    codes: np.ndarray,  # [N, L] int64, edited in place
    pair_input: np.ndarray | None,  # [N, D] float32: the input of level L-2
    upper: np.ndarray | None,  # [K2, D] float32: level L-2 codewords
    lower: np.ndarray,  # [K1, D] float32: level L-1 codewords
) -> int:
    """Move items still sharing a SID to the nearest free (code_{L-2}, code_{L-1}) pair."""
    if pair_input is None or upper is None:
        return 0
    _, sid_of, counts = np.unique(codes, axis=0, return_inverse=True, return_counts=True)
    sid_of = sid_of.reshape(-1)
    shared = np.flatnonzero(counts[sid_of] > 1)
    if len(shared) == 0:
        return 0
    taken = set(map(tuple, codes.tolist()))
    upper_sq = np.einsum("id,id->i", upper, upper)  # [K2]
    lower_sq = np.einsum("jd,jd->j", lower, lower)  # [K1]
    keeper: set[int] = set()  # SIDs whose first listed item keeps them
    moved = 0
    for item in shared.tolist():
        sid = int(sid_of[item])
        if sid not in keeper:
            keeper.add(sid)
            continue
        r = pair_input[item]  # [D]
        # Only the nearest level L-2 codewords are candidates: keeps big codebooks cheap.
        near = np.argsort(upper_sq - 2.0 * (upper @ r), kind="stable")[:PAIR_CANDIDATES]  # [S]
        u = upper[near]  # [S, D]
        # ||r - U[i] - W[j]||² minus the constant ||r||²: [S, K1]
        cost = (
            (upper_sq[near] - 2.0 * (u @ r))[:, None]
            + (lower_sq - 2.0 * (lower @ r))[None, :]
            + 2.0 * (u @ lower.T)
        )
        head = tuple(codes[item, :-2].tolist())
        for flat in np.argsort(cost, axis=None, kind="stable").tolist():
            i, j = divmod(flat, cost.shape[1])
            pair = (int(near[i]), j)
            if (*head, *pair) not in taken:
                codes[item, -2:] = pair
                taken.add((*head, *pair))
                moved += 1
                break
    return moved


def _group_ids(prefixes: np.ndarray) -> np.ndarray:  # [N, P] int64 -> [N] int64
    if prefixes.shape[1] == 0:
        return np.zeros(prefixes.shape[0], dtype=np.int64)
    _, inverse = np.unique(prefixes, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)
