"""The trie order of a table (SIDs lexicographic, popularity descending within a SID, input
order on ties) and ``build_trie`` agree with their straightforward definitions on random tables
— few or many shared SIDs, tied popularity, SIDs too wide to pack with the row number — and
``take_strings`` gathers exactly the strings asked for."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from widebeam.services.catalog.formats import CatalogError, build_trie, validate_table
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.trie_from_table import take_strings
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.string_table import encode_strings
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry


def random_table(seed: int, n: int, code_range: int, pool: int) -> CatalogTable:
    rng = np.random.default_rng(seed)
    sids = rng.integers(0, code_range, size=(pool, 3))[rng.integers(0, pool, n)]
    popularity = rng.choice([0.0, 1.0, 2.5, -0.0, 7.0], n) if seed % 2 else rng.random(n)
    ids = [f"i{seed}-{k}-{'é' * (k % 3)}" for k in range(n)]
    return CatalogTable(ids, sids.astype(np.int64), popularity.astype(np.float64))


def reference_order(table: CatalogTable) -> list[int]:
    rows = range(table.num_items)
    return sorted(rows, key=lambda i: (*table.sids[i].tolist(), -table.popularity[i], i))


@pytest.mark.parametrize(
    ("seed", "code_range", "pool"),
    [(0, 8, 5), (1, 8, 5), (2, 1000, 900), (3, 1000, 900), (4, 2**31 - 1, 300), (5, 3, 27)],
)
def test_trie_order_matches_its_definition(seed: int, code_range: int, pool: int) -> None:
    table = random_table(seed, 1000, code_range, pool)
    assert table.trie_order().tolist() == reference_order(table)


@pytest.mark.parametrize("seed", range(4))
def test_build_trie_matches_sidtrie_build(seed: int) -> None:
    table = random_table(seed, 600, 16, 150)
    layout = SidLayout.parse("0:16,16:16,32:16")
    order = reference_order(table)
    entries = [CatalogEntry(table.item_ids[i], tuple(table.sids[i].tolist())) for i in order]
    want = SidTrie.build(entries, layout)
    got = build_trie(table, layout)
    assert got.content_hash == want.content_hash
    assert list(got.item_ids) == list(want.item_ids)
    assert got.sids.tolist() == want.sids.tolist()


def test_take_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    import widebeam.services.catalog.formats.trie_from_table as tft

    monkeypatch.setattr(tft, "_TAKE_CHUNK_STRINGS", 7)  # many chunks
    rng = random.Random(3)
    strings = ["".join(rng.choice("ab漢😀\n") for _ in range(rng.randint(1, 9))) for _ in
               range(100)]  # fmt: skip
    order = np.array([rng.randrange(100) for _ in range(150)], dtype=np.int64)
    blob, offsets = take_strings(*encode_strings(strings), order)
    got = [blob[a:b].tobytes().decode() for a, b in itertools.pairwise(offsets.tolist())]
    assert got == [strings[i] for i in order.tolist()]


def test_build_trie_checks_again_for_another_layout() -> None:
    """A table validated for one layout is not taken as valid for another."""
    table = random_table(0, 50, 16, 20)
    wide, narrow = SidLayout.parse("0:16,16:16,32:16"), SidLayout.parse("0:4,4:16,20:16")
    valid = validate_table(table, wide)
    assert valid.validated_layout == wide
    assert build_trie(valid, wide).num_items == 50
    with pytest.raises(CatalogError, match=r"outside the codebook 0\.\.3"):
        build_trie(valid, narrow)
    assert valid.take(np.arange(3)).validated_layout is None
