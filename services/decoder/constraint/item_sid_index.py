"""item id -> SID codes of one catalog version, held as two numpy arrays instead of a dict.

The trie already stores every item id (grouped by SID), so the index only adds the ids' string
hashes sorted ascending and the item position of each: 12 bytes per item (int64 hash + int32
position), against ~100 bytes per item for a dict of str -> int. A lookup is a binary search
over the hashes, then a comparison with the trie's ids of equal hash (so hash collisions are
resolved exactly); the SID of an item position is a binary search over ``sid_item_offsets``.
Python's ``hash`` of a str is per process, which is all an in-process index needs.
"""

from __future__ import annotations

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
        del order, hashes

    def __len__(self) -> int:
        return len(self._item_ids)

    def __contains__(self, item_id: object) -> bool:
        return self._position(item_id) >= 0  # type: ignore[arg-type]

    def get(self, item_id: str) -> tuple[int, ...] | None:
        position = self._position(item_id)
        return None if position < 0 else self._sid_at(position)

    def resolve(self, item_ids: Sequence[str]) -> tuple[list[tuple[int, ...]], list[str]]:
        """(SIDs of the known items in order, unknown item ids in order)."""
        sids, unknown = [], []
        for item in item_ids:
            sid = self.get(item)
            if sid is None:
                unknown.append(item)
            else:
                sids.append(sid)
        return sids, unknown

    def _position(self, item_id: str) -> int:
        """Position of ``item_id`` in the trie's item ids, or -1."""
        key = self._hash_id(item_id)
        i = int(np.searchsorted(self._hashes, key))
        while i < len(self._hashes) and int(self._hashes[i]) == key:
            position = int(self._positions[i])
            if self._item_ids[position] == item_id:
                return position
            i += 1
        return -1

    def _sid_at(self, position: int) -> tuple[int, ...]:
        row = int(np.searchsorted(self._sid_item_offsets, position, side="right")) - 1
        return tuple(int(c) for c in self._sids[row])
