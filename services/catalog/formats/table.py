"""``CatalogTable``: the column-oriented result of every catalog input format.

Several items may share one SID. Within one SID the published artifact lists items by
popularity, highest first; ties keep input order. ``SidTrie.build`` keeps input order within
a SID, so build it from :meth:`CatalogTable.sorted_for_trie` (or with ``trie_from_table``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from widebeam.services.catalog.formats.bulk import paused_gc
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogEntry

# How a 1-based ``source_rows`` position is named in error messages, per input format.
_ROW_NOUN = {"jsonl": "line", "csv": "line", "parquet": "row"}


@dataclass(eq=False)  # numpy fields make a generated __eq__ ambiguous
class CatalogTable:
    item_ids: list[str]  # [num_items]
    sids: np.ndarray  # [num_items, L] int64, codes per level (not token ids)
    popularity: np.ndarray  # [num_items] float64; 0 when the input gives none
    metadata: list[dict[str, Any]] | None = None  # [num_items] free columns, None if no row has any
    format: str = "table"  # "jsonl", "csv", "parquet", "flashrec", "sid2pid" or "table"
    # [num_items] int64: 1-based line (JSONL/CSV), row (Parquet) or key (JSON object) position,
    # kept only so that validation errors can point at the input; None for hand-built tables.
    source_rows: np.ndarray | None = None
    # Per-level codebook size the input declared (sid2pid's C, or load_catalog's codebook_size).
    codebook_size: int | None = None
    # The layout ``validate_table`` last accepted this very table for (so ``build_trie`` need not
    # check it again); None when not validated against a layout. Not carried to derived tables.
    validated_layout: SidLayout | None = None

    def __repr__(self) -> str:
        # The generated repr would print every item id: useless (and huge) for 1.5M items.
        return (
            f"CatalogTable(format={self.format!r}, num_items={self.num_items}, "
            f"depth={self.depth}, metadata={self.metadata is not None}, "
            f"codebook_size={self.codebook_size})"
        )

    @property
    def num_items(self) -> int:
        return len(self.item_ids)

    @property
    def depth(self) -> int:
        """SID length L (codes per SID)."""
        return int(self.sids.shape[1]) if self.sids.ndim == 2 else 0

    # -- row access ---------------------------------------------------------------------------

    def take(self, index: np.ndarray) -> CatalogTable:
        """Rows ``index`` ([k] int64), in that order, as a new table."""
        rows = index.tolist()
        with paused_gc():
            return replace(
                self,
                item_ids=[self.item_ids[i] for i in rows],
                sids=self.sids[index],
                popularity=self.popularity[index],
                metadata=None if self.metadata is None else [self.metadata[i] for i in rows],
                source_rows=None if self.source_rows is None else self.source_rows[index],
                validated_layout=None,
            )

    def describe_row(self, i: int) -> str:
        """Where row ``i`` came from, e.g. ``"line 12"`` or ``"key '1,2,3'"``."""
        codes = self.sids[i].tolist() if self.sids.ndim == 2 else []
        if self.format == "flashrec":
            return "key '" + ",".join(map(str, codes)) + "'"
        if self.format == "sid2pid" and self.codebook_size and len(codes) == 3:
            a, b, c = codes
            return f"key '{(a * self.codebook_size + b) * self.codebook_size + c}'"
        noun = _ROW_NOUN.get(self.format)
        if noun is not None and self.source_rows is not None:
            return f"{noun} {int(self.source_rows[i])}"
        return f"item #{i}"

    # -- artifact order -----------------------------------------------------------------------

    def trie_order(self) -> np.ndarray:
        """[num_items] int64 row order: SIDs lexicographic, then popularity descending.

        Stable, so items of one SID with equal popularity keep their input order.
        """
        if self.num_items == 0:
            return np.zeros(0, dtype=np.int64)
        # np.lexsort sorts by the last key first and is stable. Packing the SID into one int64
        # key (when it fits) is faster; packing the row number in too makes every key distinct,
        # so a plain (unstable, much faster) sort of the keys gives the stable order.
        sizes = self.sids.max(axis=0).astype(np.float64) + 1  # [L]
        if self.sids.min() >= 0 and float(np.prod(sizes)) < 2.0**62:
            packed = np.zeros(self.num_items, dtype=np.int64)  # [num_items]
            for lvl, size in enumerate(sizes.astype(np.int64).tolist()):
                packed = packed * size + self.sids[:, lvl]
            row_bits = max(1, (self.num_items - 1).bit_length())
            if int(packed.max()).bit_length() + row_bits <= 63:
                return self._order_by_packed_rows(packed, row_bits)
            return np.lexsort((-self.popularity, packed)).astype(np.int64)
        keys = (-self.popularity, *(self.sids[:, lvl] for lvl in reversed(range(self.depth))))
        return np.lexsort(keys).astype(np.int64)

    def _order_by_packed_rows(self, packed: np.ndarray, row_bits: int) -> np.ndarray:
        keys = (packed << row_bits) | np.arange(self.num_items, dtype=np.int64)  # [num_items]
        keys.sort()
        order = keys & ((1 << row_bits) - 1)  # rows by SID, input order within a SID
        sorted_sids = keys >> row_bits
        del keys
        shared = sorted_sids[1:] == sorted_sids[:-1]  # [num_items-1]
        if not shared.any():
            return order
        # Only the rows of shared SIDs need popularity order: a stable sort of those few.
        in_group = np.zeros(self.num_items, dtype=bool)
        in_group[1:] |= shared
        in_group[:-1] |= shared
        at = np.flatnonzero(in_group)  # positions (in `order`) of rows of shared SIDs
        rows = order[at]
        order[at] = rows[np.lexsort((-self.popularity[rows], sorted_sids[at]))]
        return order

    def sorted_for_trie(self) -> CatalogTable:
        """This table grouped by SID, popularity descending within a SID (see module doc)."""
        return self.take(self.trie_order())

    def entries(self) -> list[CatalogEntry]:
        """(item_id, sid) entries in row order, as ``SidTrie.build`` takes them."""
        with paused_gc():
            sids = map(tuple, self.sids.tolist())
            return list(map(CatalogEntry._make, zip(self.item_ids, sids, strict=True)))

    def items_by_popularity(self) -> dict[tuple[int, ...], list[str]]:
        """SID -> its items, most popular first (the order the artifact keeps)."""
        out: dict[tuple[int, ...], list[str]] = {}
        for entry in self.sorted_for_trie().entries():
            out.setdefault(entry.sid, []).append(entry.item_id)
        return out
