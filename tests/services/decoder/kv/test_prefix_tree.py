"""The prefix tree: longest page-aligned match, reference counts, LRU eviction of unheld leaves."""

from __future__ import annotations

import pytest

from widebeam.services.decoder.kv.prefix_tree import PrefixTree


def _chain(tree: PrefixTree, tokens: list[int], pages: list[int]) -> list:
    """Insert `tokens`' full blocks under the root (held once), returning the nodes."""
    nodes, parent = [], tree.root
    for block, page in zip(tree.blocks(tokens, len(tokens)), pages, strict=True):
        node = tree.insert(parent, block, page)
        assert node is not None
        nodes.append(node)
        parent = node
    return nodes


def test_match_is_the_longest_cached_page_aligned_prefix() -> None:
    tree = PrefixTree(page_size=2)
    _chain(tree, [1, 2, 3, 4, 5, 6], [10, 11, 12])
    assert [n.page for n in tree.match(tree.blocks([1, 2, 3, 4, 9, 9, 7], 9))] == [10, 11]
    assert tree.match(tree.blocks([2, 1, 3, 4], 9)) == []
    assert [n.page for n in tree.match(tree.blocks([1, 2, 3, 4, 5, 6], 1))] == [10]  # limit
    assert tree.blocks([1, 2, 3], 9) == [(1, 2)]  # a partial page is never a block


def test_insert_refuses_a_cached_block_and_a_short_one() -> None:
    tree = PrefixTree(page_size=2)
    [node] = _chain(tree, [1, 2], [10])
    assert tree.insert(tree.root, (1, 2), 11) is None
    with pytest.raises(ValueError, match="2 tokens"):
        tree.insert(node, (3,), 12)


def test_held_nodes_are_never_evicted_and_unheld_ones_are_lru_first() -> None:
    tree = PrefixTree(page_size=1)
    a = _chain(tree, [1, 2], [10, 11])  # held
    b = _chain(tree, [5], [20])
    c = _chain(tree, [6], [30])
    tree.release(c)  # released first: least recently used
    tree.release(b)
    assert tree.unheld == 2
    assert tree.evict(1) == [30]
    assert tree.evict(5) == [20]  # a is held: nothing more to give
    assert tree.num_nodes == 2 and tree.unheld == 0
    tree.release(a)
    assert tree.evict(5) == [11, 10]  # the leaf, then its parent once it is a leaf
    assert tree.num_nodes == 0 and tree.match(tree.blocks([1, 2], 2)) == []
    assert tree.evicted == 4


def test_a_node_used_again_moves_to_the_back_of_the_lru_order() -> None:
    tree = PrefixTree(page_size=1)
    x, y = _chain(tree, [1], [10]), _chain(tree, [2], [20])
    tree.release(x)
    tree.release(y)
    again = tree.match(tree.blocks([1], 1))
    tree.acquire(again)
    assert tree.evict(1) == [20]  # x is held now
    tree.release(again)
    assert tree.evict(1) == [10]


def test_release_more_often_than_acquired_is_an_error() -> None:
    tree = PrefixTree(page_size=1)
    nodes = _chain(tree, [1], [10])
    tree.release(nodes)
    with pytest.raises(RuntimeError, match="released more often"):
        tree.release(nodes)


def test_stale_lru_entries_stay_bounded() -> None:
    tree = PrefixTree(page_size=1)
    nodes = _chain(tree, [1], [10])
    tree.release(nodes)
    for _ in range(1000):  # a hot prefix taken and released many times
        tree.acquire(nodes)
        tree.release(nodes)
    assert len(tree._lru) <= 2 * tree.num_nodes + 65
    assert tree.evict(1) == [10]
