"""A catalog's trie: ``build_trie`` from a validated ``CatalogTable``, ``load_trie`` from any input.

``load_trie`` is the one path every catalog takes to a trie — uploads to the catalog service
and the decoder's catalog file alike — so the same file gives the same items in the same order
(per SID: popularity descending, ties in input order) however it is served.

``build_trie`` is equivalent to ``SidTrie.build(table.sorted_for_trie().entries(), layout)`` but
skips the per-item ``CatalogEntry`` objects, which cost more than the trie construction itself
at catalog scale (1.5M items).
"""

from __future__ import annotations

import os
from typing import IO

from widebeam.services.catalog.formats.bulk import paused_gc
from widebeam.services.catalog.formats.load import load_catalog
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.validate import validate_table
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import DEFAULT_DENSE_CELL_BUDGET, SidTrie
from widebeam.services.catalog.trie_build import build_arrays


def build_trie(
    table: CatalogTable, layout: SidLayout, dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET
) -> SidTrie:
    """Validate ``table`` against ``layout`` (CatalogError on failure) and build its trie."""
    with paused_gc():
        ordered = validate_table(table, layout).sorted_for_trie()
        # validate_table did every check entries_to_columns would (depth, ranges, duplicates).
        arrays = build_arrays(ordered.item_ids, ordered.sids, layout)
        return SidTrie(layout, *arrays, dense_cell_budget=dense_cell_budget)


def load_trie(
    source: bytes | str | os.PathLike[str] | IO[bytes],
    layout: SidLayout,
    *,
    format: str | None = None,
    codebook_size: int | None = None,
    max_bytes: int | None = None,
    max_items: int | None = None,
) -> tuple[SidTrie, str]:
    """Parse, validate against ``layout`` and build the trie; returns it and the input's format.

    Arguments as :func:`load_catalog`'s; raises ``CatalogError`` naming the row / key at fault.
    """
    table = load_catalog(
        source,
        format=format,
        codebook_size=codebook_size,
        max_bytes=max_bytes,
        layout=layout,
        max_items=max_items,
    )
    return build_trie(table, layout), table.format
