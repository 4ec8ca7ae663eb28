"""The vectorised output-path walk names the same items as walking the trie token by token."""

from __future__ import annotations

import random

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry
from widebeam.services.decoder.constraint.path_items import PathItems


def _trie(seed: int, items: int = 80) -> SidTrie:
    rng = random.Random(seed)
    layout = SidLayout.parse("10:6,16:6,22:6;begin=40;end=41")
    codes = [tuple(rng.randrange(6) for _ in range(3)) for _ in range(items)]
    entries = [CatalogEntry(f"i{i}", sid) for i, sid in enumerate(codes)]
    return SidTrie.build(entries, layout)


def _walk_one(trie: SidTrie, start: int, path: list[int]) -> list[str]:
    node = start
    for token in path:
        if trie.is_leaf(node):
            break
        node = trie.child(node, token)
        if node < 0:
            return []
    return trie.items_for_leaf(node) if trie.is_leaf(node) else []


def _random_path(rng: random.Random, trie: SidTrie) -> list[int]:
    sid = trie.sids[rng.randrange(trie.num_sids)].tolist()
    path = [10 + sid[0], 16 + sid[1], 22 + sid[2], 41, rng.choice([3, 41, 0])]
    kind = rng.randrange(5)
    if kind == 0:  # leaves the trie at some level
        path[rng.randrange(3)] = rng.choice([0, 9, 39, 99, 10**6])
    elif kind == 1:  # stops before its leaf
        path = path[: rng.randrange(3)]
    elif kind == 2:  # a code that no item has (likely) at the last level
        path[2] = 22 + rng.randrange(6)
    return path


def test_items_match_the_token_by_token_walk() -> None:
    rng = random.Random(1)
    for seed in range(4):
        trie = _trie(seed)
        lookup = PathItems(trie)
        for start in (0, 1):
            paths = [_random_path(rng, trie) for _ in range(300)]
            if start == 0:
                paths = [[40, *p] for p in paths[:150]] + paths[150:]
            got = lookup.items(start, paths)
            assert got == [_walk_one(trie, start, p) for p in paths]
            assert any(got) and not all(got)  # both outcomes are exercised


def test_items_of_no_paths_and_of_empty_paths() -> None:
    lookup = PathItems(_trie(0))
    assert lookup.items(1, []) == []
    assert lookup.items(1, [[], []]) == [[], []]


def test_items_of_shared_sids_keep_catalog_order() -> None:
    layout = SidLayout.parse("10:6,16:6,22:6;begin=40;end=41")
    entries = [CatalogEntry(f"item{i}", (1, 2, 3)) for i in range(5)]
    entries.append(CatalogEntry("other", (0, 0, 0)))
    lookup = PathItems(SidTrie.build(entries, layout))
    path = [11, 18, 25, 41]
    assert lookup.items(1, [path, [10, 16, 22, 41]]) == [[f"item{i}" for i in range(5)], ["other"]]


def test_children_of_repeated_and_out_of_range_lookups() -> None:
    trie = _trie(2)
    lookup = PathItems(trie)
    edges = [(n, t) for n in range(trie.num_nodes) for t in trie.children(n)[0].tolist()]
    rng = random.Random(3)
    pairs = [rng.choice(edges) for _ in range(200)] * 3  # many repeats, as beams share paths
    # A token past the key base must not alias the edge it would encode: node n's token
    # key_base + t spells node n + 1's token t.
    node, token = next((n, t) for n, t in edges if n > 0)
    pairs += [(node - 1, token + lookup.key_base), (node, -1), (node, lookup.key_base)]
    got = lookup.children(np.array([n for n, _ in pairs]), np.array([t for _, t in pairs]))
    expected = [trie.child(n, t) if 0 <= t < lookup.key_base else -1 for n, t in pairs]
    assert got.tolist() == expected and got.dtype == np.int64
    assert expected[-3:] == [-1, -1, -1]
    none = np.zeros(0, np.int64)
    assert lookup.children(none, none).size == 0


def test_any_path_reads_as_the_level_by_level_walk_does() -> None:
    """Built tries hold leaves at their last depth only, so a path of in-range tokens takes
    the walk without leaf tests; the rest (negative tokens, which the walk skips, and tokens
    past the key base) and tries without that shape take the level-by-level walk: both name
    the same items, for lists and arrays alike."""
    rng = random.Random(5)
    for seed in range(3):
        trie = _trie(seed)
        fast, walked = PathItems(trie), PathItems(trie)
        walked._leaf_depth = None  # as for a trie whose leaves are not all at one depth
        assert fast._leaf_depth == trie.num_depths - 1
        odd = [-1, -7, 10**6, fast.key_base, fast.key_base + 11]
        for start in (0, 1, trie.num_nodes - 1, -1):
            paths = [_random_path(rng, trie) for _ in range(200)]
            for path in paths[:80]:
                path[rng.randrange(len(path) or 1) if path else 0 : 0] = [rng.choice(odd)]
            array = np.full((len(paths), max(map(len, paths))), -1, dtype=np.int64)
            for i, path in enumerate(paths):
                array[i, : len(path)] = path
            expected = walked.items(start, paths)
            assert fast.items(start, paths) == expected
            assert fast.items(start, array) == walked.items(start, array)
            if start == 1:
                assert any(expected) and not all(expected)


def test_paths_too_short_for_a_leaf_name_nothing() -> None:
    lookup = PathItems(_trie(1))
    sid = lookup.trie.sids[0].tolist()
    assert lookup.items(1, np.array([[10 + sid[0], 16 + sid[1]]])) == [[]]
    assert lookup.items(1, [[10 + sid[0], 16 + sid[1], 22 + sid[2]]]) == [[]]  # no end token
    complete = [10 + sid[0], 16 + sid[1], 22 + sid[2], 41]
    leaf = lookup.trie.walk(complete, 1)
    assert lookup.items(1, [complete]) == [lookup.trie.items_for_leaf(leaf)] != [[]]
