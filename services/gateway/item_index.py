"""`ItemIndex`: a catalog file's items (id, title, SID) searchable by id prefix or title
substring, for the playground's item picker and the titles beside its recommendations.

The served catalog (the decoders' trie, the Redis artifacts) keeps item ids and SIDs only, so
titles come from a catalog file read here once: any format the catalog service takes, its free
`title` column (`name` when there is no `title`). State is columnar: ids sorted and joined into
one string with int64 offsets, the case-folded titles likewise in catalog order, SIDs as one
int32 matrix; about 2 x (id length + title length) + 4 x SID depth + 32 bytes per item. A title
search is one scan of the joined titles (`str.find`, in C); an id prefix is a binary search."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from widebeam.services.catalog.formats import load_catalog

TITLE_COLUMNS = ("title", "name")
_SEPARATOR = "\n"  # never inside a stored title (newlines become spaces), so no match spans two


@dataclass(frozen=True)
class FoundItem:
    item_id: str
    title: str | None
    sid: list[int]


@dataclass(frozen=True)
class SearchPage:
    items: list[FoundItem]
    next_offset: int | None  # None: no more matches


class _JoinedStrings:
    """Strings stored as one joined string and offsets, read back by position."""

    def __init__(self, values: list[str]) -> None:
        self.text = _SEPARATOR.join(values) + _SEPARATOR
        lengths = np.fromiter((len(v) + 1 for v in values), np.int64, len(values))
        self.starts = np.concatenate(([0], np.cumsum(lengths)))  # [n + 1] int64

    def __len__(self) -> int:
        return len(self.starts) - 1

    def __getitem__(self, k: int) -> str:
        return self.text[int(self.starts[k]) : int(self.starts[k + 1]) - 1]

    def position_of(self, char_index: int) -> int:
        """The string that character `char_index` of the joined text belongs to."""
        return int(np.searchsorted(self.starts, char_index, side="right")) - 1


class ItemIndex:
    """Items of one catalog file; build with `ItemIndex.load(path)`."""

    def __init__(self, item_ids: list[str], titles: list[str | None], sids: np.ndarray) -> None:
        # sids: [num_items, L] int, catalog order; item_ids and titles: [num_items]
        order = sorted(range(len(item_ids)), key=item_ids.__getitem__)
        self._sorted_ids = _JoinedStrings([item_ids[i] for i in order])
        self._row_of_sorted = np.asarray(order, dtype=np.int64)  # [num_items] int64
        self._sorted_of_row = np.empty(len(order), dtype=np.int64)  # [num_items] int64
        self._sorted_of_row[self._row_of_sorted] = np.arange(len(order), dtype=np.int64)
        cleaned = [_clean_title(t) for t in titles]
        self._has_title = np.fromiter((t is not None for t in cleaned), bool, len(cleaned))
        self._titles = _JoinedStrings([t or "" for t in cleaned])  # catalog order
        self._folded = _JoinedStrings([(t or "").casefold() for t in cleaned])
        self._sids = np.ascontiguousarray(sids, dtype=np.int32)  # [num_items, L] int32

    @classmethod
    def load(cls, path: str | Path) -> ItemIndex:
        """Parse `path` (`CatalogError` / `OSError` when it cannot be read)."""
        table = load_catalog(Path(path))
        metadata = table.metadata or [{}] * table.num_items
        titles = [_title_of(row) for row in metadata]
        return cls(table.item_ids, titles, table.sids)

    def __len__(self) -> int:
        return len(self._sorted_ids)

    def search(self, query: str, offset: int, limit: int) -> SearchPage:
        """Items whose id starts with `query` (in id order), then the others whose title contains
        it, case-insensitively (in catalog order); the page `offset`..`offset + limit` of them."""
        lo, hi = self._id_prefix_range(query)
        by_id = hi - lo
        rows = [int(r) for r in self._row_of_sorted[lo + offset : min(hi, lo + offset + limit)]]
        # Title matches up to one past the page, so the answer knows whether more exist.
        wanted = offset + limit + 1 - by_id
        by_title = self._title_matches(query.casefold(), lo, hi, wanted) if query else []
        rows += by_title[max(0, offset - by_id) : max(0, offset + limit - by_id)]
        more = by_id + len(by_title) > offset + limit
        return SearchPage([self._item(r) for r in rows], offset + limit if more else None)

    def lookup(self, item_ids: list[str]) -> list[FoundItem]:
        """The items among `item_ids` that this file has, in the order asked."""
        found = []
        for item_id in item_ids:
            k = bisect.bisect_left(_SortedView(self._sorted_ids), item_id)
            if k < len(self._sorted_ids) and self._sorted_ids[k] == item_id:
                found.append(self._item(int(self._row_of_sorted[k])))
        return found

    def _id_prefix_range(self, prefix: str) -> tuple[int, int]:
        """The sorted positions [lo, hi) of the ids that start with `prefix` (contiguous)."""
        ids = self._sorted_ids
        lo = bisect.bisect_left(_SortedView(ids), prefix)
        low, high = lo, len(ids)
        while low < high:  # first position at or after lo whose id lacks the prefix
            mid = (low + high) // 2
            if ids[mid].startswith(prefix):
                low = mid + 1
            else:
                high = mid
        return lo, low

    def _title_matches(self, folded: str, id_lo: int, id_hi: int, count: int) -> list[int]:
        """Up to `count` rows whose folded title contains `folded`, in catalog order, leaving
        out the rows whose id is in the sorted positions [id_lo, id_hi) (listed first)."""
        rows: list[int] = []
        if _SEPARATOR in folded:  # a match would span two titles
            return rows
        text, start = self._folded.text, 0
        while len(rows) < count:
            at = text.find(folded, start)
            if at < 0:
                break
            row = self._folded.position_of(at)
            if not id_lo <= int(self._sorted_of_row[row]) < id_hi:
                rows.append(row)
            start = int(self._folded.starts[row + 1])  # one hit per title
        return rows

    def _item(self, row: int) -> FoundItem:
        title = self._titles[row] if self._has_title[row] else None
        k = int(self._sorted_of_row[row])
        return FoundItem(self._sorted_ids[k], title, self._sids[row].tolist())


class _SortedView:
    """The sorted ids as a sequence `bisect` can search without materialising a list."""

    def __init__(self, strings: _JoinedStrings) -> None:
        self._strings = strings

    def __len__(self) -> int:
        return len(self._strings)

    def __getitem__(self, k: int) -> str:
        return self._strings[k]


def _title_of(row: dict[str, Any]) -> str | None:
    for column in TITLE_COLUMNS:
        value = row.get(column)
        if value is not None and str(value).strip():
            return str(value)
    return None


def _clean_title(title: str | None) -> str | None:
    return None if title is None else " ".join(title.split())
