"""SidTrie against a brute-force dict-of-dicts trie on random catalogs."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from widebeam.services.catalog.sid_layout import SidLayout, SidLevel
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry

LEAF = "__items__"


def make_layout(sizes: list[int], begin: bool, end: bool) -> SidLayout:
    levels, base = [], 10
    for size in sizes:
        levels.append(SidLevel(base, size))
        base += size
    # begin above the code ranges, end below, so special tokens are not simply the smallest ids.
    return SidLayout(tuple(levels), base + 3 if begin else None, 2 if end else None)


def random_catalog(rng: random.Random, sizes: list[int], n_items: int) -> list[CatalogEntry]:
    pool = [tuple(rng.randrange(s) for s in sizes) for _ in range(max(1, n_items // 2))]
    # Fewer distinct SIDs than items, so many SIDs are shared by several items.
    return [CatalogEntry(f"item-{i}", rng.choice(pool)) for i in range(n_items)]


def reference_trie(entries: list[CatalogEntry], layout: SidLayout) -> dict[Any, Any]:
    root: dict[Any, Any] = {}
    for item, sid in entries:
        node = root
        for tok in path_tokens(sid, layout):
            node = node.setdefault(tok, {})
        node.setdefault(LEAF, []).append(item)
    return root


def path_tokens(sid: tuple[int, ...], layout: SidLayout) -> list[int]:
    toks = [] if layout.begin_token_id is None else [layout.begin_token_id]
    toks += [layout.code_to_token(lvl, c) for lvl, c in enumerate(sid)]
    return toks + ([] if layout.end_token_id is None else [layout.end_token_id])


def assert_matches(trie: SidTrie, ref: dict[Any, Any]) -> None:
    visited = 0
    frontier = [(0, ref, 0)]  # (trie node, reference node, depth)
    while frontier:
        node, rnode, depth = frontier.pop()
        visited += 1
        assert trie.depth_offsets[depth] <= node < trie.depth_offsets[depth + 1]
        toks, kids = trie.children(node)
        expected = sorted(k for k in rnode if k != LEAF)
        assert toks.tolist() == expected
        if LEAF in rnode:
            assert not expected and trie.is_leaf(node)
            assert trie.items_for_leaf(node) == rnode[LEAF]
        else:
            assert expected and trie.leaf_sid[node] == -1
            with pytest.raises(ValueError, match="not a leaf"):
                trie.items_for_leaf(node)
        for tok, kid in zip(toks.tolist(), kids.tolist(), strict=True):
            assert trie.child(node, tok) == kid
            frontier.append((kid, rnode[tok], depth + 1))
        assert trie.child(node, 10**6) == -1
    assert visited == trie.num_nodes


def assert_dense_agrees(trie: SidTrie) -> None:
    for d, table in enumerate(trie.dense_tables):
        if table is None:
            continue
        base, size = trie.token_ranges[d]
        lo, hi = trie.depth_offsets[d], trie.depth_offsets[d + 1]
        assert table.shape == (hi - lo, size) and table.dtype == np.int32
        for node in range(lo, hi):
            row = [trie.child(node, base + t) for t in range(size)]
            assert table[node - lo].tolist() == row


LAYOUT_CASES = [
    ([4, 3, 5], True, True),
    ([4, 3, 5], False, False),
    ([3, 6, 2, 4], True, False),
    ([3, 6, 2, 4], False, True),
    ([2, 2, 2, 2], True, True),
]


@pytest.mark.parametrize(("sizes", "begin", "end"), LAYOUT_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_bruteforce(sizes: list[int], begin: bool, end: bool, seed: int) -> None:
    rng = random.Random(seed)
    layout = make_layout(sizes, begin, end)
    entries = random_catalog(rng, sizes, rng.choice([1, 2, 30, 200]))
    trie = SidTrie.build(entries, layout)
    assert_matches(trie, reference_trie(entries, layout))
    assert_dense_agrees(trie)

    # BFS numbering: each depth is contiguous and edges only go one depth down.
    assert trie.num_depths == layout.path_length(True) + 1
    assert trie.child_nodes.tolist() == list(range(1, trie.num_nodes))
    assert trie.child_tokens.dtype == np.int32 and trie.child_offsets.dtype == np.int64

    distinct = sorted({e.sid for e in entries})
    assert trie.sids.tolist() == [list(s) for s in distinct]
    assert trie.num_items == len(entries) and trie.num_sids == len(distinct)
    for sid in distinct:
        assert trie.lookup_sid(sid) == [e.item_id for e in entries if e.sid == sid]
        leaf = trie.walk(path_tokens(sid, layout))
        assert leaf >= 0 and trie.sids[trie.leaf_sid[leaf]].tolist() == list(sid)
        if begin:
            after_begin = trie.start_node(prompt_ends_with_begin=True)
            assert trie.walk(path_tokens(sid, layout)[1:], start=after_begin) == leaf
    if end:  # after the last code but before <|sid_end|> is not a leaf
        assert trie.walk(path_tokens(distinct[0], layout)[:-1]) >= 0
        assert not trie.is_leaf(trie.walk(path_tokens(distinct[0], layout)[:-1]))


def test_start_node_and_begin_root() -> None:
    entries = [CatalogEntry("x", (1, 2, 3))]
    with_begin = SidTrie.build(entries, make_layout([4, 4, 4], True, False))
    assert with_begin.start_node(False) == 0 and with_begin.start_node(True) == 1
    toks, kids = with_begin.children(0)
    assert toks.tolist() == [with_begin.layout.begin_token_id] and kids.tolist() == [1]
    without = SidTrie.build(entries, make_layout([4, 4, 4], False, False))
    assert without.start_node(False) == 0 and without.start_node(True) == 0
    assert without.children(0)[0].tolist() == [11]


def test_lookup_and_walk_misses() -> None:
    layout = make_layout([4, 4, 4], True, True)
    trie = SidTrie.build([CatalogEntry("x", (1, 2, 3))], layout)
    assert trie.lookup_sid((1, 2, 0)) == []
    assert trie.lookup_sid((1, 2)) == []
    assert trie.lookup_sid((1, 2, 9)) == []
    assert trie.lookup_sid((1, 2, 3)) == ["x"]
    assert trie.walk([layout.begin_token_id, 999]) == -1
    assert trie.walk([]) == 0


def test_stats() -> None:
    entries = [
        CatalogEntry("a", (0, 0, 0)),
        CatalogEntry("b", (0, 1, 0)),
        CatalogEntry("c", (0, 1, 0)),
    ]
    trie = SidTrie.build(entries, make_layout([2, 2, 2], False, True))
    assert trie.stats() == {
        "nodes_per_depth": [1, 1, 2, 2, 2],
        "num_nodes": 8,
        "num_edges": 7,
        "max_branching": 2,
        "num_items": 3,
        "num_sids": 2,
        "dense_depths": [0, 1, 2, 3],
    }
    assert trie.max_branching == 2


def test_dense_budget_limits_tables() -> None:
    rng = random.Random(5)
    sizes = [8, 8, 8]
    entries = random_catalog(rng, sizes, 300)
    layout = make_layout(sizes, True, True)
    assert all(t is None for t in SidTrie.build(entries, layout, dense_cell_budget=0).dense_tables)
    trie = SidTrie.build(entries, layout, dense_cell_budget=64)
    # root (1x1), after-begin (1x8), after-code-0 (<=8 x 8) fit; deeper depths have > 8 nodes.
    assert [t is not None for t in trie.dense_tables] == [True, True, True, False, False, False]
    assert_dense_agrees(trie)


def test_arrays_are_read_only() -> None:
    trie = SidTrie.build([CatalogEntry("x", (1, 2, 3))], make_layout([4, 4, 4], True, True))
    with pytest.raises(ValueError):
        trie.child_tokens[0] = 5
