"""Vectorised construction of the SID trie's arrays (see ``trie.SidTrie`` for their meaning).

The only per-item Python work is pulling fields out of the entry objects; grouping, sorting
and node numbering are numpy passes over whole columns, so 1.5M items build in seconds.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogEntry, CatalogError


class TrieArrays(NamedTuple):
    depth_offsets: np.ndarray  # [num_depths+1] int64
    child_offsets: np.ndarray  # [num_nodes+1] int64
    child_tokens: np.ndarray  # [num_edges] int32
    child_nodes: np.ndarray  # [num_edges] int32
    leaf_sid: np.ndarray  # [num_nodes] int32
    sids: np.ndarray  # [num_sids, L] int32
    sid_item_offsets: np.ndarray  # [num_sids+1] int64
    item_ids: Sequence[str]  # [num_items], grouped by SID


def step_ranges(layout: SidLayout) -> list[tuple[int, int]]:
    """(token base, range size) of the edges leaving each non-leaf depth, root first."""
    steps = []
    if layout.begin_token_id is not None:
        steps.append((layout.begin_token_id, 1))
    steps.extend((lv.base, lv.size) for lv in layout.levels)
    if layout.end_token_id is not None:
        steps.append((layout.end_token_id, 1))
    return steps


def entries_to_columns(
    entries: Sequence[CatalogEntry], layout: SidLayout
) -> tuple[list[str], np.ndarray]:
    """Validate entries against the layout; return (item ids, codes [n, L] int64)."""
    n, depth = len(entries), layout.depth
    if n == 0:
        raise CatalogError("catalog is empty: no items")
    item_ids = [e[0] for e in entries]
    sid_list = [e[1] for e in entries]
    lengths = np.fromiter(map(len, sid_list), dtype=np.int64, count=n)
    bad = np.flatnonzero(lengths != depth)
    if bad.size:
        i = int(bad[0])
        raise CatalogError(
            f"item {item_ids[i]!r}: SID has {lengths[i]} codes but the layout has depth {depth}"
        )
    codes = np.fromiter(chain.from_iterable(sid_list), dtype=np.int64, count=n * depth)
    codes = codes.reshape(n, depth)
    for lvl, level in enumerate(layout.levels):
        col = codes[:, lvl]
        bad = np.flatnonzero((col < 0) | (col >= level.size))
        if bad.size:
            i = int(bad[0])
            raise CatalogError(
                f"item {item_ids[i]!r}: SID code {col[i]} at level {lvl} is outside the layout's "
                f"codebook 0..{level.size - 1}"
            )
    if len(set(item_ids)) != n:
        item_ids, codes = _drop_duplicate_items(item_ids, codes)
    return item_ids, codes


def _drop_duplicate_items(item_ids: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    # Error path / rare path only: the per-item loop is fine here.
    first: dict[str, int] = {}
    keep = np.ones(len(item_ids), dtype=bool)
    for i, item in enumerate(item_ids):
        j = first.setdefault(item, i)
        if j != i:
            if not np.array_equal(codes[i], codes[j]):
                raise CatalogError(
                    f"item {item!r} appears with two SIDs: {codes[j].tolist()} and "
                    f"{codes[i].tolist()}"
                )
            keep[i] = False
    kept = np.flatnonzero(keep)
    return [item_ids[i] for i in kept], codes[kept]


def _stable_lex_order(codes: np.ndarray, layout: SidLayout) -> np.ndarray:
    """Row order sorting codes lexicographically; stable so items keep input order per SID."""
    sizes = [lv.size for lv in layout.levels]
    if float(np.prod(np.array(sizes, dtype=np.float64))) < 2.0**62:
        # One packed int64 key sorts faster than a multi-key lexsort.
        key = np.zeros(len(codes), dtype=np.int64)
        for lvl, size in enumerate(sizes):
            key = key * size + codes[:, lvl]
        return np.argsort(key, kind="stable")
    return np.lexsort(tuple(codes[:, lvl] for lvl in reversed(range(codes.shape[1]))))


def build_arrays(
    item_ids: Sequence[str], codes: np.ndarray, layout: SidLayout, grouped: bool = False
) -> TrieArrays:
    """Build the BFS-numbered CSR trie from validated columns; ``grouped``: the rows are
    already in SID order (lexicographic), so they are kept as they are."""
    n, _depth = codes.shape
    if grouped:
        order, sorted_codes = None, codes
    else:
        order = _stable_lex_order(codes, layout)
        sorted_codes = codes[order]
    row_differs = np.any(sorted_codes[1:] != sorted_codes[:-1], axis=1)
    sid_starts = np.flatnonzero(np.concatenate(([True], row_differs)))
    sids = sorted_codes[sid_starts].astype(np.int32)
    num_sids = len(sids)
    sid_item_offsets = np.append(sid_starts, n).astype(np.int64)
    if order is None or n <= 1 or (order == np.arange(n)).all():
        grouped_ids = item_ids
    else:
        grouped_ids = list(operator.itemgetter(*order.tolist())(item_ids))

    # Each non-root node has exactly one incoming edge, so edges are listed in child-node order:
    # parents[k], tokens[k] describe the edge into node k+1. BFS over lexicographically sorted
    # SIDs makes parents non-decreasing and tokens ascending within a parent, i.e. valid CSR.
    parents: list[np.ndarray] = []
    tokens: list[np.ndarray] = []
    counts = [1]
    prev_offset = 0
    if layout.begin_token_id is not None:
        parents.append(np.zeros(1, dtype=np.int64))
        tokens.append(np.array([layout.begin_token_id], dtype=np.int64))
        counts.append(1)
        prev_offset = 1
    prev_local = np.zeros(num_sids, dtype=np.int64)  # per SID row: local id of its prefix node
    is_new = np.zeros(num_sids, dtype=bool)
    is_new[0] = True
    for lvl, level in enumerate(layout.levels):
        col = sids[:, lvl]
        is_new[1:] |= col[1:] != col[:-1]
        starts = np.flatnonzero(is_new)
        parents.append(prev_local[starts] + prev_offset)
        tokens.append(col[starts].astype(np.int64) + level.base)
        prev_offset += counts[-1]
        counts.append(len(starts))
        prev_local = np.cumsum(is_new) - 1
    if layout.end_token_id is not None:
        parents.append(np.arange(num_sids, dtype=np.int64) + prev_offset)
        tokens.append(np.full(num_sids, layout.end_token_id, dtype=np.int64))
        counts.append(num_sids)

    depth_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    num_nodes = int(depth_offsets[-1])
    if num_nodes >= 2**31:
        raise CatalogError(f"trie has {num_nodes} nodes; node ids must fit in int32")
    edge_parents = np.concatenate(parents)
    child_offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(edge_parents, minlength=num_nodes), out=child_offsets[1:])
    leaf_sid = np.full(num_nodes, -1, dtype=np.int32)
    leaf_sid[depth_offsets[-2] :] = np.arange(num_sids, dtype=np.int32)
    return TrieArrays(
        depth_offsets=depth_offsets,
        child_offsets=child_offsets,
        child_tokens=np.concatenate(tokens).astype(np.int32),
        child_nodes=np.arange(1, num_nodes, dtype=np.int32),
        leaf_sid=leaf_sid,
        sids=sids,
        sid_item_offsets=sid_item_offsets,
        item_ids=grouped_ids,
    )


def csr_rows(offsets: np.ndarray) -> np.ndarray:  # [offsets[-1] - offsets[0]] int64
    """The row (0-based, from ``offsets[0]``) of every entry of a CSR layout: what
    ``np.repeat(np.arange(rows), np.diff(offsets))`` gives, built from operations that release
    the GIL. ``np.repeat`` holds it for its whole copy (~0.3 s at 17M edges), which stalls the
    serving threads of the process that loads a catalog version."""
    offsets = np.asarray(offsets, dtype=np.int64)  # [rows+1] non-decreasing
    rows = np.zeros(int(offsets[-1] - offsets[0]), dtype=np.int64)
    if rows.size == 0:
        return rows
    nonempty = np.flatnonzero(np.diff(offsets))  # rows with entries, ascending
    # the first entry of each non-empty row steps the running row id up to it
    rows[offsets[nonempty[1:]] - offsets[0]] = np.diff(nonempty)
    rows[0] = nonempty[0]
    return np.cumsum(rows)  # not in place: numpy's in-place accumulate holds the GIL


def dense_tables(
    depth_offsets: np.ndarray,
    child_offsets: np.ndarray,
    child_tokens: np.ndarray,
    child_nodes: np.ndarray,
    steps: list[tuple[int, int]],
    cell_budget: int,
) -> list[np.ndarray | None]:
    """Per depth: int32 [nodes_at_depth, range_size] child table (-1 = no child), or None."""
    tables: list[np.ndarray | None] = []
    for d in range(len(depth_offsets) - 1):
        lo, hi = int(depth_offsets[d]), int(depth_offsets[d + 1])
        if d >= len(steps) or (hi - lo) * steps[d][1] > cell_budget:
            tables.append(None)  # leaves have no next token; too-large depths stay CSR-only
            continue
        base, size = steps[d]
        table = np.full((hi - lo, size), -1, dtype=np.int32)
        e_lo, e_hi = int(child_offsets[lo]), int(child_offsets[hi])
        rows = csr_rows(child_offsets[lo : hi + 1])
        table[rows, child_tokens[e_lo:e_hi].astype(np.int64) - base] = child_nodes[e_lo:e_hi]
        tables.append(table)
    return tables
