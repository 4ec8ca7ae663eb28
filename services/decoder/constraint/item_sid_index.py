"""item id -> SID codes of one catalog version, held as one sorted numpy array instead of a dict.

The trie already stores every item id (a string table, grouped by SID), so the index adds 8
bytes per item, against ~100 for a dict of str -> int: a uint64 per item whose high bits are
the id's 64-bit hash and whose low ``ceil(log2(items))`` bits are its position in the trie,
sorted. The hashes are computed over the trie's string table with numpy
(``StringTable.hashes``), so building the index does no per-item Python work. A lookup is a
binary search for the id's hash bits (one ``searchsorted`` for a whole history), then a byte
comparison with the trie's ids whose hash bits are equal, so collisions are resolved exactly;
an item's SID row is found from its position with one more ``searchsorted`` over the trie's SID
groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from widebeam.services.catalog.string_table import hash_encoded, pack_hash_index, position_bits
from widebeam.services.catalog.trie import SidTrie


class ItemSidIndex:
    """item id -> SID codes of one trie version. Built once per version, off the request path.

    ``hash_id`` replaces the table hash with a per-id Python function (tests use it to force
    collisions); None, the default, hashes the whole table with numpy."""

    def __init__(self, trie: SidTrie, hash_id: Callable[[str], int] | None = None) -> None:
        self._hash_id = hash_id
        self._item_ids = trie.item_ids
        self._sids = trie.sids  # [num_sids, L] int32
        self._sid_item_offsets = trie.sid_item_offsets  # [num_sids+1] int64
        n = len(self._item_ids)
        if hash_id is None:  # the table's own index (built once per version, maybe elsewhere)
            self._packed = self._item_ids.hash_index  # [n] uint64: hash bits | position, sorted
        else:
            hashes = np.fromiter(map(hash_id, self._item_ids), dtype=np.int64, count=n)
            self._packed = pack_hash_index(hashes)
        self._position_bits = position_bits(n)
        self._position_mask = np.uint64((1 << self._position_bits) - 1)

    def __len__(self) -> int:
        return len(self._item_ids)

    def __contains__(self, item_id: object) -> bool:
        return isinstance(item_id, str) and self._positions_of([item_id])[0] >= 0

    def get(self, item_id: str) -> tuple[int, ...] | None:
        position = self._positions_of([item_id])[0]
        return None if position < 0 else tuple(self._sids[self._sid_rows([position])[0]].tolist())

    def resolve(self, item_ids: Sequence[str]) -> tuple[list[tuple[int, ...]], list[str]]:
        """(SIDs of the known items in order, unknown item ids in order)."""
        rows, unknown = self.resolve_rows(item_ids)
        return list(map(tuple, rows.tolist())), unknown

    def resolve_rows(self, item_ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
        """`resolve`'s SIDs as one array ([known, L] int32, in order), for a caller that
        works on them with numpy (a history's prompt) rather than as tuples."""
        positions = self._positions_of(item_ids)
        known = [p for p in positions if p >= 0]
        rows = self._sids[self._sid_rows(known)] if known else self._sids[:0]
        unknown = [item for item, p in zip(item_ids, positions, strict=True) if p < 0]
        return rows, unknown

    def _sid_rows(self, positions: list[int]) -> np.ndarray:  # [len(positions)] int64
        return np.searchsorted(self._sid_item_offsets, positions, side="right") - 1

    def _hash_bits(self, hashes: np.ndarray) -> np.ndarray:  # [m] uint64, position bits 0
        return hashes.view(np.uint64) & ~self._position_mask

    def _positions_of(self, item_ids: Sequence[str]) -> list[int]:
        """Per id: its item position in the trie, or -1 when the trie has no such id."""
        if not item_ids:
            return []
        # lone surrogates (never in a valid UTF-8 id) give bytes that match no id
        encoded = [item.encode("utf-8", "surrogatepass") for item in item_ids]
        if self._hash_id is None:
            hashes = hash_encoded(encoded)  # [m] int64
        else:
            hashes = np.array([self._hash_id(item) for item in item_ids], dtype=np.int64)
        keys = self._hash_bits(hashes)  # [m] uint64
        if not len(self):
            return [-1] * len(encoded)
        starts = np.searchsorted(self._packed, keys)  # [m] first entry with these hash bits, if any
        # Each id's first entry is nearly always the id itself or no id's (other ids sharing its
        # hash bits are rare): one gather and one byte comparison each settle all but those.
        firsts = self._packed[np.minimum(starts, len(self) - 1)]  # [m] uint64
        same_bits = (firsts & ~self._position_mask) == keys  # [m] bool
        candidates = np.where(same_bits, firsts & self._position_mask, 0).astype(np.int64)
        stored = self._item_ids.raws(candidates)
        found = []
        rows = zip(encoded, same_bits.tolist(), stored, candidates.tolist(), strict=True)
        for i, (wanted, same, raw, position) in enumerate(rows):
            if not same:
                found.append(-1)
            elif raw == wanted:
                found.append(position)
            else:
                found.append(self._scan_from(wanted, int(keys[i]), int(starts[i]) + 1))
        return found

    def _scan_from(self, wanted: bytes, key: int, i: int) -> int:
        """The position of id `wanted` among the entries from `i` on that share its hash bits
        (`key`), or -1."""
        packed, ids, n = self._packed, self._item_ids, len(self)
        bits, mask = self._position_bits, int(self._position_mask)
        while i < n and (entry := int(packed[i])) >> bits == key >> bits:
            if ids.raw(entry & mask) == wanted:
                return entry & mask
            i += 1
        return -1
