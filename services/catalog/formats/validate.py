"""Whole-catalog checks run after parsing; any failure rejects the whole upload.

Parsers already reject malformed rows (bad types, negative / non-integer / NaN / bool codes,
mixed depths). Here: empty catalog, codes outside the codebook (the layout's per-level sizes
and/or the table's declared ``codebook_size``), depth different from the layout's, non-finite
popularity, and duplicate item ids. A duplicate with the *same* SID is dropped, keeping the
first row (its popularity and metadata win); with a different SID it is an error naming both
rows.
"""

from __future__ import annotations

import numpy as np

from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogError


def validate_table(table: CatalogTable, layout: SidLayout | None = None) -> CatalogTable:
    """Check ``table`` (against ``layout`` when given); return it deduplicated."""
    if layout is not None and table.validated_layout == layout:
        return table  # this very table passed these checks (load_catalog, then build_trie)
    valid = _validate(table, layout)
    valid.validated_layout = layout
    return valid


def _validate(table: CatalogTable, layout: SidLayout | None) -> CatalogTable:
    _check_shapes(table)
    n = table.num_items
    if n == 0:
        raise CatalogError("catalog is empty: no items")
    if table.depth == 0:
        raise CatalogError("catalog SIDs have no codes")
    if layout is not None and table.depth != layout.depth:
        raise CatalogError(
            f"{table.describe_row(0)}: item {table.item_ids[0]!r} has a SID of {table.depth} "
            f"codes, but the SID layout has {layout.depth} levels"
        )
    for lvl in range(table.depth):
        limits = []
        if table.codebook_size is not None:
            limits.append(table.codebook_size)
        if layout is not None:
            limits.append(layout.levels[lvl].size)
        _check_level(table, lvl, min(limits) if limits else None)
    bad = np.flatnonzero(~np.isfinite(table.popularity))
    if bad.size:
        i = int(bad[0])
        raise CatalogError(
            f"{table.describe_row(i)}: item {table.item_ids[i]!r}: popularity "
            f"{table.popularity[i]} is not finite"
        )
    _check_item_ids(table)
    if not _may_have_duplicates(table.item_ids):
        return table
    return _dedupe(table)


def _check_item_ids(table: CatalogTable) -> None:
    ids = table.item_ids
    # C-level passes first (no Python code per item); the row loop only runs to name a culprit
    # (or when some id is a str subclass, which is fine).
    if set(map(type, ids)) <= {str} and all(ids):
        return
    for i, item in enumerate(ids):
        if not isinstance(item, str) or not item:
            raise CatalogError(
                f"{table.describe_row(i)}: item id {item!r} is not a non-empty string"
            )


def _may_have_duplicates(item_ids: list[str]) -> bool:
    """False when the ids are surely distinct: their hashes are (8 bytes an id, where a set of
    10M ids takes ~1 GB); equal hashes are settled by a set."""
    hashes = np.fromiter(map(hash, item_ids), dtype=np.int64, count=len(item_ids))  # [n] int64
    hashes.sort()
    if not (hashes[1:] == hashes[:-1]).any():
        return False
    return len(set(item_ids)) != len(item_ids)


def _check_shapes(table: CatalogTable) -> None:
    sids, n = table.sids, table.num_items
    if not isinstance(sids, np.ndarray) or sids.ndim != 2 or sids.shape[0] != n:
        raise CatalogError(f"catalog table: sids must be an [{n}, L] array")
    # Bool and float arrays would silently pass range checks; codes are integers only.
    if sids.dtype == np.bool_ or not np.issubdtype(sids.dtype, np.integer):
        raise CatalogError(f"catalog table: SID codes must be integers, got dtype {sids.dtype}")
    if table.popularity.shape != (n,):
        raise CatalogError(f"catalog table: popularity must have shape [{n}]")
    if table.metadata is not None and len(table.metadata) != n:
        raise CatalogError(f"catalog table: metadata must have {n} rows")


def _check_level(table: CatalogTable, lvl: int, size: int | None) -> None:
    col = table.sids[:, lvl]  # [num_items]
    bad = np.flatnonzero(col < 0)
    if bad.size:
        i = int(bad[0])
        raise CatalogError(
            f"{table.describe_row(i)}: item {table.item_ids[i]!r}: SID code {int(col[i])} at "
            f"level {lvl} is negative"
        )
    if size is None:
        return
    bad = np.flatnonzero(col >= size)
    if bad.size:
        i = int(bad[0])
        raise CatalogError(
            f"{table.describe_row(i)}: item {table.item_ids[i]!r}: SID code {int(col[i])} at "
            f"level {lvl} is outside the codebook 0..{size - 1}"
        )


def _dedupe(table: CatalogTable) -> CatalogTable:
    first: dict[str, int] = {}
    keep = np.ones(table.num_items, dtype=bool)  # [num_items]
    for i, item in enumerate(table.item_ids):
        j = first.setdefault(item, i)
        if j == i:
            continue
        if not np.array_equal(table.sids[i], table.sids[j]):
            raise CatalogError(
                f"{table.describe_row(i)}: item {item!r} has SID {table.sids[i].tolist()}, but "
                f"{table.describe_row(j)} gave it SID {table.sids[j].tolist()} (duplicate item "
                f"ids must agree)"
            )
        keep[i] = False
    return table.take(np.flatnonzero(keep))
