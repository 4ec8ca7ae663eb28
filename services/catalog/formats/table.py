"""``CatalogTable``: the column-oriented result of every catalog input format.

Several items may share one SID. Within one SID the published artifact lists items by
popularity, highest first; ties keep input order. ``SidTrie.build`` keeps input order within
a SID, so build it from :meth:`CatalogTable.sorted_for_trie` (or call :meth:`build_trie`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from widebeam.services.catalog.jsonl_catalog import CatalogEntry
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import DEFAULT_DENSE_CELL_BUDGET, SidTrie

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
    source_rows: np.ndarray | None = field(default=None, repr=False)
    # Per-level codebook size the input declared (sid2pid's C, or load_catalog's codebook_size).
    codebook_size: int | None = None

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
        return replace(
            self,
            item_ids=[self.item_ids[i] for i in rows],
            sids=self.sids[index],
            popularity=self.popularity[index],
            metadata=None if self.metadata is None else [self.metadata[i] for i in rows],
            source_rows=None if self.source_rows is None else self.source_rows[index],
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
        # np.lexsort sorts by the last key first and is stable.
        keys = (-self.popularity, *(self.sids[:, lvl] for lvl in reversed(range(self.depth))))
        return np.lexsort(keys).astype(np.int64)

    def sorted_for_trie(self) -> CatalogTable:
        """This table grouped by SID, popularity descending within a SID (see module doc)."""
        return self.take(self.trie_order())

    def entries(self) -> list[CatalogEntry]:
        """(item_id, sid) entries in row order, as ``SidTrie.build`` takes them."""
        return [
            CatalogEntry(item, tuple(sid))
            for item, sid in zip(self.item_ids, self.sids.tolist(), strict=True)
        ]

    def items_by_popularity(self) -> dict[tuple[int, ...], list[str]]:
        """SID -> its items, most popular first (the order the artifact keeps)."""
        out: dict[tuple[int, ...], list[str]] = {}
        for entry in self.sorted_for_trie().entries():
            out.setdefault(entry.sid, []).append(entry.item_id)
        return out

    def build_trie(
        self, layout: SidLayout, dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET
    ) -> SidTrie:
        """The SID trie of this table, items per SID in artifact (popularity) order."""
        return SidTrie.build(self.sorted_for_trie().entries(), layout, dense_cell_budget)
