"""item id -> SID codes of one catalog version, held as two numpy arrays instead of a dict.

The trie already stores every item id (grouped by SID), so the index only adds the ids' string
hashes sorted ascending, the item position and the SID row of each: 16 bytes per item (int64
hash, int32 position, int32 SID row), against ~100 bytes per item for a dict of str -> int. A
lookup is a binary search over the hashes (one ``searchsorted`` for a whole history), then a
comparison with the trie's ids of equal hash, so hash collisions are resolved exactly.
Python's ``hash`` of a str is per process, which is all an in-process index needs.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np

from widebeam.services.catalog.trie import SidTrie


class ItemSidIndex:
    """item id -> SID codes of one trie version. Built once per version, off the request path."""

    def __init__(self, trie: SidTrie, hash_id: Callable[[str], int] = hash) -> None:
        self._hash_id = hash_id
        self._item_ids = trie.item_ids
        self._sids = trie.sids  # [num_sids, L] int32
        self._sid_item_offsets = trie.sid_item_offsets  # [num_sids+1] int64
        n = len(self._item_ids)
        hashes = np.fromiter(map(hash_id, self._item_ids), dtype=np.int64, count=n)  # [n] int64
        order = np.argsort(hashes, kind="stable")
        position_dtype = np.int32 if n < 2**31 else np.int64
        self._positions = order.astype(position_dtype)  # [n] item position, by ascending hash
        self._hashes = hashes[order]  # [n] int64, ascending
        del hashes
        sid_sizes = np.diff(self._sid_item_offsets)
        sid_of_item = np.repeat(np.arange(len(sid_sizes), dtype=np.int32), sid_sizes)  # [n] int32
        self._sid_rows = sid_of_item[order]  # [n] int32, SID row by ascending hash
        del order, sid_of_item

    def __len__(self) -> int:
        return len(self._item_ids)

    def __contains__(self, item_id: object) -> bool:
        return self._slots([item_id])[0] >= 0  # type: ignore[list-item]

    def get(self, item_id: str) -> tuple[int, ...] | None:
        slot = self._slots([item_id])[0]
        return None if slot < 0 else tuple(self._sids[self._sid_rows[slot]].tolist())

    def resolve(self, item_ids: Sequence[str]) -> tuple[list[tuple[int, ...]], list[str]]:
        """(SIDs of the known items in order, unknown item ids in order)."""
        slots = self._slots(item_ids)
        known = [s for s in slots if s >= 0]
        rows = self._sids[self._sid_rows[known]].tolist() if known else []
        unknown = [item for item, slot in zip(item_ids, slots, strict=True) if slot < 0]
        return list(map(tuple, rows)), unknown

    def _slots(self, item_ids: Sequence[str]) -> list[int]:
        """Per id: its index into the hash-sorted arrays, or -1 when the trie has no such id."""
        keys = [self._hash_id(item) for item in item_ids]
        if len(keys) < 16:  # bisect costs ~3 us a key; numpy's fixed overhead is ~15 us a call
            starts = [bisect.bisect_left(self._hashes, key) for key in keys]
        else:
            starts = np.searchsorted(self._hashes, np.array(keys, dtype=np.int64)).tolist()
        hashes, positions, ids, n = self._hashes, self._positions, self._item_ids, len(self)
        slots = []
        for item, key, i in zip(item_ids, keys, starts, strict=True):
            while i < n and hashes[i] == key and ids[positions[i]] != item:
                i += 1
            slots.append(i if i < n and hashes[i] == key else -1)
        return slots
