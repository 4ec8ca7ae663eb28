"""Row-at-a-time accumulation of a ``CatalogTable`` for the text and JSON-object formats.

Codes, popularity and row numbers go to typed arrays (8 bytes a value, not a Python object),
metadata only for rows that have some, and ``max_items`` is checked as rows arrive: a parser
streaming a huge or inflating input stops at the limit instead of after the whole input."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.types import CatalogError


class TableBuilder:
    """Collects rows as flat Python lists; one numpy conversion at :meth:`finish`."""

    def __init__(
        self, format: str, codebook_size: int | None = None, max_items: int | None = None
    ) -> None:
        self.format = format
        self.codebook_size = codebook_size
        self.max_items = max_items
        self.item_ids: list[str] = []
        self._codes = array("q")  # [num_items * L] int64, row-major
        self._popularity = array("d")  # [num_items] float64
        self._metadata: dict[int, dict[str, Any]] = {}  # row index -> its non-empty metadata
        self._rows = array("q")  # [num_items] int64
        self._depth: int | None = None
        self._depth_where = ""

    def add(
        self,
        item_id: str,
        codes: Sequence[int],
        where: str,
        source_row: int,
        popularity: float = 0.0,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Append one validated row; rejects a SID whose depth differs from the first row's."""
        if self.max_items is not None and len(self.item_ids) >= self.max_items:
            raise CatalogError(
                f"{where}: the catalog has more than its limit of {self.max_items} items"
            )
        if self._depth is None:
            if not codes:
                raise CatalogError(f"{where}: item {item_id!r}: SID has no codes")
            self._depth, self._depth_where = len(codes), where
        elif len(codes) != self._depth:
            raise CatalogError(
                f"{where}: SID of item {item_id!r} has {len(codes)} codes, but "
                f"{self._depth_where} has {self._depth} (mixed depths: all SIDs must have the "
                f"same number of codes)"
            )
        if metadata:
            self._metadata[len(self.item_ids)] = metadata
        self.item_ids.append(item_id)
        self._codes.extend(codes)
        self._popularity.append(popularity)
        self._rows.append(source_row)

    def add_block(
        self,
        item_ids: list[str],
        codes: np.ndarray,
        source_rows: np.ndarray,
        popularity: np.ndarray,
        noun: str,
    ) -> None:
        """Append rows already checked one by one (``codes`` [n, L] int64 in range, ids valid,
        popularity finite, no metadata), as :meth:`add` would row after row: the same depth
        and ``max_items`` errors, naming the row (``f"{noun} {source_rows[i]}"``) at fault."""
        n, depth = codes.shape
        if not n:
            return
        where = f"{noun} {int(source_rows[0])}"
        if self._depth is None:
            self._depth, self._depth_where = depth, where
        elif depth != self._depth:
            self.add(item_ids[0], codes[0].tolist(), where, int(source_rows[0]))  # raises
        if self.max_items is not None and len(self.item_ids) + n > self.max_items:
            i = self.max_items - len(self.item_ids)
            raise CatalogError(
                f"{noun} {int(source_rows[i])}: the catalog has more than its limit of "
                f"{self.max_items} items"
            )
        self.item_ids.extend(item_ids)
        self._codes.frombytes(np.ascontiguousarray(codes, dtype=np.int64).tobytes())
        self._popularity.frombytes(np.ascontiguousarray(popularity, dtype=np.float64).tobytes())
        self._rows.frombytes(np.ascontiguousarray(source_rows, dtype=np.int64).tobytes())

    def finish(self) -> CatalogTable:
        depth, n = self._depth or 0, len(self.item_ids)
        metadata = [self._metadata.get(i, {}) for i in range(n)] if self._metadata else None
        return CatalogTable(
            item_ids=self.item_ids,
            sids=np.frombuffer(self._codes, dtype=np.int64).reshape(n, depth).copy(),
            popularity=np.frombuffer(self._popularity, dtype=np.float64).copy(),
            metadata=metadata,
            format=self.format,
            source_rows=np.frombuffer(self._rows, dtype=np.int64).copy(),
            codebook_size=self.codebook_size,
        )
