"""A catalog's trie: ``build_trie`` from a validated ``CatalogTable``, ``load_trie`` from any input.

``load_trie`` is the one path every catalog takes to a trie — uploads to the catalog service
and the decoder's catalog file alike — so the same file gives the same items in the same order
(per SID: popularity descending, ties in input order) however it is served.

``build_trie`` is equivalent to ``SidTrie.build(table.sorted_for_trie().entries(), layout)`` but
makes no per-item Python objects: the ids are encoded once into a string table in input order
and put in trie order by numpy (gathering millions of ``str`` in a random order was most of the
build at catalog scale), and the trie takes that table as it is.
"""

from __future__ import annotations

import os
from typing import IO

import numpy as np

from widebeam.services.catalog.formats.bulk import paused_gc
from widebeam.services.catalog.formats.load import load_catalog
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.validate import validate_table
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.string_table import StringTable, encode_strings
from widebeam.services.catalog.trie import DEFAULT_DENSE_CELL_BUDGET, SidTrie
from widebeam.services.catalog.trie_build import build_arrays


def build_trie(
    table: CatalogTable, layout: SidLayout, dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET
) -> SidTrie:
    """Validate ``table`` against ``layout`` (CatalogError on failure) and build its trie."""
    with paused_gc():
        valid = validate_table(table, layout)
        order = valid.trie_order()  # [n] int64
        ids = StringTable(*take_strings(*encode_strings(valid.item_ids), order))
        # validate_table did every check entries_to_columns would (depth, ranges, duplicates);
        # the rows are in trie order, which groups them by SID.
        arrays = build_arrays(ids, valid.sids[order], layout, grouped=True)
        return SidTrie(layout, *arrays, dense_cell_budget=dense_cell_budget)


_TAKE_CHUNK_STRINGS = 1 << 20  # strings gathered per numpy pass: bounds the byte index array


def take_strings(
    blob: np.ndarray, offsets: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(blob, offsets) of the strings ``order`` ([k] int64) of (``blob``, ``offsets``)."""
    lengths = (offsets[1:] - offsets[:-1])[order]  # [k] int64
    out_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint8)
    for lo in range(0, len(order), _TAKE_CHUNK_STRINGS):
        hi = min(lo + _TAKE_CHUNK_STRINGS, len(order))
        lens = lengths[lo:hi]
        base = int(out_offsets[lo])
        # byte j of taken string i comes from offsets[order[i]] + j
        local_start = out_offsets[lo:hi] - base
        index = np.repeat(offsets[order[lo:hi]] - local_start, lens)
        index += np.arange(len(index), dtype=np.int64)
        out[base : int(out_offsets[hi])] = blob[index]
    return out, out_offsets


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
