"""ItemSidIndex (sorted hashes over the trie's ids) answers exactly what a dict of item -> SID
answers, on hand-made and random catalogs, hash collisions included."""

from __future__ import annotations

import numpy as np
import pytest

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry
from widebeam.services.decoder.constraint.item_sid_index import ItemSidIndex

BARE = SidLayout.parse("100:10,110:10")
BRACKETED = SidLayout.parse("100:6,106:5,111:7;begin=98;end=99")


def reference(trie: SidTrie) -> dict[str, tuple[int, ...]]:
    """The dict the index replaces: every trie item -> its SID codes."""
    out = {}
    for row, (lo, hi) in enumerate(
        zip(trie.sid_item_offsets[:-1], trie.sid_item_offsets[1:], strict=True)
    ):
        for item in trie.item_ids[int(lo) : int(hi)]:
            out[item] = tuple(int(c) for c in trie.sids[row])
    return out


def random_trie(seed: int, layout: SidLayout, items: int) -> SidTrie:
    rng = np.random.default_rng(seed)
    alphabet = list("abcxyzé漢0123-_ ")
    ids: set[str] = set()
    while len(ids) < items:
        ids.add("".join(rng.choice(alphabet, size=int(rng.integers(1, 9)))))
    sizes = [lv.size for lv in layout.levels]
    # Few distinct SIDs, so many items share one.
    pool = [tuple(int(rng.integers(0, s)) for s in sizes) for _ in range(max(1, items // 3))]
    entries = [CatalogEntry(i, pool[int(rng.integers(0, len(pool)))]) for i in sorted(ids)]
    return SidTrie.build(list(rng.permutation(np.array(entries, dtype=object))), layout)


def test_small_catalog() -> None:
    entries = [CatalogEntry("a", (1, 2)), CatalogEntry("b", (0, 5)), CatalogEntry("c", (1, 2))]
    index = ItemSidIndex(SidTrie.build(entries, BARE))
    assert len(index) == 3 and "b" in index and "z" not in index
    assert index.get("c") == (1, 2) and index.get("z") is None
    assert index.resolve(["b", "z", "a"]) == ([(0, 5), (1, 2)], ["z"])
    assert all(type(c) is int for c in index.get("a") or ())


@pytest.mark.parametrize(
    "hash_id", [None, hash, len, lambda s: 7], ids=["table", "hash", "len", "constant"]
)
@pytest.mark.parametrize("seed", range(4))
def test_random_catalogs_match_a_dict(seed: int, hash_id) -> None:
    layout = BRACKETED if seed % 2 else BARE
    trie = random_trie(seed, layout, items=300)
    index = ItemSidIndex(trie, hash_id=hash_id)
    expected = reference(trie)
    assert len(index) == len(expected) == trie.num_items
    probes = [*expected, "", "nope", "a" * 20, "é", *(i + "!" for i in list(expected)[:50])]
    for item in probes:
        assert index.get(item) == expected.get(item), item
        assert (item in index) == (item in expected), item
    shuffled = list(np.random.default_rng(seed).permutation(np.array(probes, dtype=object)))
    known = [expected[i] for i in shuffled if i in expected]
    assert index.resolve(shuffled) == (known, [i for i in shuffled if i not in expected])
    rows, unknown = index.resolve_rows(shuffled)
    assert rows.dtype == np.int32 and rows.shape == (len(known), layout.depth)
    assert list(map(tuple, rows.tolist())) == known and unknown == index.resolve(shuffled)[1]


def test_resolve_rows_of_no_known_items() -> None:
    index = ItemSidIndex(SidTrie.build([CatalogEntry("a", (1, 2))], BARE))
    rows, unknown = index.resolve_rows(["x", "y"])
    assert rows.shape == (0, 2) and unknown == ["x", "y"]
    assert index.resolve_rows([])[0].shape == (0, 2) and index.resolve([]) == ([], [])


def test_non_string_keys_are_absent() -> None:
    index = ItemSidIndex(SidTrie.build([CatalogEntry("1", (1, 2))], BARE))
    assert 1 not in index and None not in index and "1" in index
