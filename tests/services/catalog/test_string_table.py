"""StringTable reads like the list of strings it was made from (indexing, slices, iteration,
equality), its numpy hashes equal the query-side hashes, ids that are not UTF-8 on their own are
found, and the content hash's canonical item order equals Python's per-SID sort."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from widebeam.services.catalog.string_table import (
    StringTable,
    hash_strings,
    pack_hash_index,
    position_bits,
)
from widebeam.services.catalog.trie_io import canonical_item_ids

ALPHABETS = ["abc-0", "ab\n é漢\x00😀", "\x00a"]


def random_strings(rng: random.Random, alphabet: str, count: int, longest: int = 6) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))
            for _ in range(count)]  # fmt: skip


@pytest.mark.parametrize("alphabet", ALPHABETS)
@pytest.mark.parametrize("seed", range(10))
def test_reads_like_the_list(alphabet: str, seed: int) -> None:
    rng = random.Random(seed)
    strings = random_strings(rng, alphabet, rng.randint(0, 60))
    table = StringTable.from_strings(strings)
    assert len(table) == len(strings) and list(table) == strings and table == strings
    for i in range(-len(strings), len(strings)):
        assert table[i] == strings[i]
    for _ in range(20):
        a, b = rng.randint(-5, 65), rng.randint(-5, 65)
        assert table[a:b] == strings[a:b]
    assert table[::2] == strings[::2]
    positions = [rng.randrange(len(strings)) for _ in range(10)] if strings else []
    assert table.take(positions) == [strings[p] for p in positions]
    with pytest.raises(IndexError):
        table[len(strings)]
    assert table == StringTable.from_strings(list(strings)) and table != [*strings, "x"]


@pytest.mark.parametrize("alphabet", ALPHABETS)
@pytest.mark.parametrize("seed", range(6))
def test_take_ranges_equals_one_slice_per_range(alphabet: str, seed: int) -> None:
    rng = random.Random(seed)
    strings = random_strings(rng, alphabet, rng.randint(1, 60))
    table = StringTable.from_strings(strings)
    n = len(strings)
    starts = [rng.randint(0, n) for _ in range(rng.randint(0, 30))]
    stops = [a + (1 if rng.random() < 0.5 else rng.randint(0, n - a)) if a < n else a
             for a in starts]  # fmt: skip
    got = table.take_ranges(np.array(starts, dtype=np.int64), np.array(stops, dtype=np.int64))
    assert got == [strings[a:b] for a, b in zip(starts, stops, strict=True)]
    ones = np.arange(n, dtype=np.int64)
    assert table.take_ranges(ones, ones + 1) == [[s] for s in strings]
    assert table.take_ranges(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == []
    for bad in ([(0, n + 1)], [(-1, 0)], [(2, 1)] if n >= 2 else [(1, 0)], [(n, n + 1)]):
        with pytest.raises(IndexError):
            table.take_ranges(np.array([bad[0][0]]), np.array([bad[0][1]]))
    # empty ranges name no strings wherever they start
    empty = np.array([-5, 0, n + 3], dtype=np.int64)
    assert table.take_ranges(empty, empty) == [[], [], []]
    with pytest.raises(IndexError):  # one string a range, one of them past the end
        table.take_ranges(np.array([0, n]), np.array([1, n + 1]))
    assert [bytes(r) for r in table.raws(ones)] == [s.encode() for s in strings]


@pytest.mark.parametrize("alphabet", ALPHABETS)
def test_table_hashes_equal_query_hashes(alphabet: str) -> None:
    rng = random.Random(1)
    strings = list(dict.fromkeys(random_strings(rng, alphabet, 3000, longest=12)))
    table = StringTable.from_strings(strings)
    hashes = table.hashes()
    assert hashes.dtype == np.int64 and hashes.tolist() == hash_strings(strings).tolist()
    assert len(set(hashes.tolist())) == len(strings)  # distinct ids, distinct hashes here
    assert hash_strings(["ab", "ba", "a", "a\x00"]).tolist() == [
        *hash_strings(["ab"]).tolist(), *hash_strings(["ba"]).tolist(),
        *hash_strings(["a"]).tolist(), *hash_strings(["a\x00"]).tolist()]  # fmt: skip


def test_hash_chunks_agree_with_one_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing runs chunk by chunk over the buffer; where a chunk ends changes nothing."""
    import widebeam.services.catalog.string_table as st

    strings = [*random_strings(random.Random(2), "abé漢", 500, longest=30), "x" * 100]
    whole = StringTable.from_strings(strings).hashes().tolist()
    monkeypatch.setattr(st, "_HASH_CHUNK_BYTES", 17)
    monkeypatch.setattr(st, "_POWER_CACHE", {})
    assert StringTable.from_strings(strings).hashes().tolist() == whole


def test_utf8_check() -> None:
    blob = np.frombuffer("aé".encode(), dtype=np.uint8)
    StringTable(blob, np.array([0, 1, 3])).check_utf8()
    with pytest.raises(UnicodeDecodeError):
        StringTable(blob, np.array([0, 2, 3])).check_utf8()  # splits é between two strings
    with pytest.raises(UnicodeDecodeError):
        StringTable(np.array([0xFF], dtype=np.uint8), np.array([0, 1])).check_utf8()
    with pytest.raises(ValueError):
        StringTable(blob, np.array([0, 2]))  # does not cover the buffer
    with pytest.raises(ValueError):
        StringTable(blob, np.array([0, 2, 1, 3]))


@pytest.mark.parametrize("alphabet", [*ALPHABETS, "ab"])
@pytest.mark.parametrize("seed", range(6))
def test_canonical_order_is_a_per_sid_sort(alphabet: str, seed: int) -> None:
    rng = random.Random(seed)
    longest = 80 if seed == 5 else 6  # past the fixed-width column: the per-SID path
    strings = list(dict.fromkeys(random_strings(rng, alphabet, 200, longest)))
    cuts = sorted(rng.sample(range(1, len(strings)), k=min(60, len(strings) - 1)))
    offsets = np.array([0, *cuts, len(strings)], dtype=np.int64)
    expected = []
    for lo, hi in itertools.pairwise(offsets.tolist()):
        expected += sorted(strings[lo:hi])
    table = StringTable.from_strings(strings)
    assert list(canonical_item_ids(offsets, table)) == expected
    already = StringTable.from_strings(expected)
    assert canonical_item_ids(offsets, already) is already


def test_hash_index_sorts_hash_bits_over_positions() -> None:
    strings = random_strings(random.Random(3), "abc", 500, longest=5)
    table = StringTable.from_strings(list(dict.fromkeys(strings)))
    index, bits = table.hash_index, position_bits(len(table))
    assert index.dtype == np.uint64 and (np.diff(index) > 0).all()
    positions = (index & np.uint64((1 << bits) - 1)).astype(np.int64)
    assert sorted(positions.tolist()) == list(range(len(table)))
    expected = table.hashes().view(np.uint64)[positions] >> np.uint64(bits)
    np.testing.assert_array_equal(index >> np.uint64(bits), expected)
    np.testing.assert_array_equal(pack_hash_index(table.hashes()), index)
    other = StringTable.from_strings(list(table))
    other.attach_hash_index(pack_hash_index(table.hashes()))
    np.testing.assert_array_equal(other.hash_index, index)
    with pytest.raises(ValueError):
        other.attach_hash_index(index[:-1])
