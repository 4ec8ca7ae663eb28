"""Row-at-a-time accumulation of a ``CatalogTable`` for the text and JSON-object formats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.types import CatalogError


class TableBuilder:
    """Collects rows as flat Python lists; one numpy conversion at :meth:`finish`."""

    def __init__(self, format: str, codebook_size: int | None = None) -> None:
        self.format = format
        self.codebook_size = codebook_size
        self.item_ids: list[str] = []
        self._codes: list[int] = []  # [num_items * L], row-major
        self._popularity: list[float] = []
        self._metadata: list[dict[str, Any]] = []
        self._has_metadata = False
        self._rows: list[int] = []
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
        self.item_ids.append(item_id)
        self._codes.extend(codes)
        self._popularity.append(popularity)
        self._rows.append(source_row)
        self._metadata.append(metadata or {})
        self._has_metadata = self._has_metadata or bool(metadata)

    def finish(self) -> CatalogTable:
        depth = self._depth or 0
        return CatalogTable(
            item_ids=self.item_ids,
            sids=np.array(self._codes, dtype=np.int64).reshape(len(self.item_ids), depth),
            popularity=np.array(self._popularity, dtype=np.float64),
            metadata=self._metadata if self._has_metadata else None,
            format=self.format,
            source_rows=np.array(self._rows, dtype=np.int64),
            codebook_size=self.codebook_size,
        )
