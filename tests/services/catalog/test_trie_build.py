"""SidTrie validation errors, content hash, artifact round trip and build speed."""

from __future__ import annotations

import io
import random
import sys

import numpy as np
import pytest

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.trie_build import csr_rows
from widebeam.services.catalog.types import CatalogEntry, CatalogError

from .test_trie import make_layout, random_catalog

LAYOUT = make_layout([4, 3, 5], True, True)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "empty"),
        ([CatalogEntry("a", (1, 2))], "item 'a': SID has 2 codes but the layout has depth 3"),
        (
            [CatalogEntry("a", (1, 2, 3)), CatalogEntry("b", (1, 2, 3, 0))],
            "item 'b': SID has 4 codes",
        ),
        ([CatalogEntry("a", (4, 0, 0))], "item 'a': SID code 4 at level 0 .* 0..3"),
        ([CatalogEntry("a", (0, 0, 5))], "item 'a': SID code 5 at level 2 .* 0..4"),
        ([CatalogEntry("a", (0, -1, 0))], "item 'a': SID code -1 at level 1"),
        (
            [CatalogEntry("a", (0, 0, 0)), CatalogEntry("a", (0, 0, 1))],
            r"item 'a' appears with two SIDs: \[0, 0, 0\] and \[0, 0, 1\]",
        ),
    ],
)
def test_build_errors(entries: list[CatalogEntry], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        SidTrie.build(entries, LAYOUT)


def test_build_dedupes_identical_duplicates() -> None:
    entries = [
        CatalogEntry("a", (0, 0, 0)),
        CatalogEntry("b", (0, 0, 0)),
        CatalogEntry("a", (0, 0, 0)),
    ]
    trie = SidTrie.build(entries, LAYOUT)
    assert trie.lookup_sid((0, 0, 0)) == ["a", "b"]


def test_hash_is_input_order_invariant() -> None:
    rng = random.Random(7)
    entries = random_catalog(rng, [4, 3, 5], 300)
    base = SidTrie.build(entries, LAYOUT)
    for _ in range(3):
        shuffled = entries[:]
        rng.shuffle(shuffled)
        other = SidTrie.build(shuffled, LAYOUT)
        assert other.content_hash == base.content_hash
        assert other.sids.tolist() == base.sids.tolist()
    assert len(base.content_hash) == 64


def test_hash_sees_content_changes() -> None:
    entries = [CatalogEntry("a", (0, 0, 0)), CatalogEntry("b", (1, 2, 3))]
    h = SidTrie.build(entries, LAYOUT).content_hash
    moved = [CatalogEntry("a", (0, 0, 1)), CatalogEntry("b", (1, 2, 3))]
    renamed = [CatalogEntry("a", (0, 0, 0)), CatalogEntry("c", (1, 2, 3))]
    swapped = [CatalogEntry("b", (0, 0, 0)), CatalogEntry("a", (1, 2, 3))]
    # Item id boundaries matter: "ab" + "c" must differ from "a" + "bc".
    split = [CatalogEntry("ab", (0, 0, 0)), CatalogEntry("c", (0, 0, 0))]
    joined = [CatalogEntry("a", (0, 0, 0)), CatalogEntry("bc", (0, 0, 0))]
    hashes = {h}
    for variant in (moved, renamed, swapped, split, joined):
        hashes.add(SidTrie.build(variant, LAYOUT).content_hash)
    hashes.add(SidTrie.build(entries, make_layout([4, 3, 5], False, True)).content_hash)
    hashes.add(SidTrie.build(entries, make_layout([4, 3, 6], True, True)).content_hash)
    assert len(hashes) == 8


@pytest.mark.parametrize(("begin", "end"), [(True, True), (False, False), (True, False)])
def test_arrays_round_trip(begin: bool, end: bool) -> None:
    rng = random.Random(3)
    entries = random_catalog(rng, [4, 3, 5, 2], 200)
    entries.append(CatalogEntry("ünïcode ☃\n", (0, 0, 0, 0)))
    trie = SidTrie.build(entries, make_layout([4, 3, 5, 2], begin, end))
    arrays = trie.to_arrays()
    assert all(isinstance(a, np.ndarray) for a in arrays.values())
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # the artifact survives a plain numpy file format
    buf.seek(0)
    with np.load(buf) as loaded:
        back = SidTrie.from_arrays(dict(loaded))
    assert back.layout == trie.layout
    assert back.item_ids == trie.item_ids
    assert back.content_hash == trie.content_hash
    for name in ("depth_offsets", "child_offsets", "child_tokens", "child_nodes", "leaf_sid"):
        got, want = getattr(back, name), getattr(trie, name)
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    assert np.array_equal(back.sids, trie.sids)
    assert np.array_equal(back.sid_item_offsets, trie.sid_item_offsets)
    for a, b in zip(back.dense_tables, trie.dense_tables, strict=True):
        assert (a is None and b is None) or np.array_equal(a, b)


def test_from_arrays_rejects_inconsistent() -> None:
    arrays = SidTrie.build([CatalogEntry("a", (0, 0, 0))], LAYOUT).to_arrays()
    with pytest.raises(CatalogError, match="malformed"):
        SidTrie.from_arrays({k: v for k, v in arrays.items() if k != "child_tokens"})
    bad = dict(arrays, child_tokens=arrays["child_tokens"][:-1])
    with pytest.raises(CatalogError, match="edge count"):
        SidTrie.from_arrays(bad)
    with pytest.raises(CatalogError, match="format version"):
        SidTrie.from_arrays(dict(arrays, format_version=np.array([99])))


def test_from_arrays_does_not_freeze_caller_arrays() -> None:
    arrays = SidTrie.build([CatalogEntry("a", (0, 0, 0))], LAYOUT).to_arrays()
    copies = {k: v.copy() for k, v in arrays.items()}
    SidTrie.from_arrays(copies)
    assert copies["child_tokens"].flags.writeable


def test_large_build_is_vectorised() -> None:
    n, size = 200_000, 8192
    codes = np.random.default_rng(0).integers(0, size, size=(n, 3)).tolist()
    entries = [CatalogEntry(f"item{i}", tuple(c)) for i, c in enumerate(codes)]
    layout = SidLayout.parse(f"10:{size},{10 + size}:{size},{10 + 2 * size}:{size};begin=1;end=2")
    # Vectorised means the number of Python-level calls does not grow with the items: count
    # them (a machine-independent measure, unlike seconds).
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        trie = SidTrie.build(entries, layout)
    finally:
        sys.setprofile(None)
    assert calls < 2000, f"building 200k items made {calls} Python calls"
    assert trie.num_items == n
    assert "item123" in trie.lookup_sid(tuple(codes[123]))


@pytest.mark.parametrize("seed", range(8))
def test_csr_rows_equals_repeat(seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, size=int(rng.integers(1, 40)))
    if seed == 0:
        counts[:] = 0  # no entries at all
    elif seed == 1:
        counts[0] = counts[-1] = 0  # empty first and last rows
    offsets = np.concatenate(([0], np.cumsum(counts))) + int(rng.integers(0, 5))  # any start
    want = np.repeat(np.arange(len(counts)), counts)
    got = csr_rows(offsets)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    # a slice of a larger layout, as the dense tables take one depth's nodes
    lo, hi = sorted(int(x) for x in rng.integers(0, len(counts) + 1, size=2))
    assert np.array_equal(
        csr_rows(offsets[lo : hi + 1]), np.repeat(np.arange(hi - lo), counts[lo:hi])
    )
