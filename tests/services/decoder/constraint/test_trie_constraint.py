"""Device-side trie masks and advances agree with the catalog trie walked one node at a time."""

from __future__ import annotations

import random

import torch

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry
from widebeam.services.decoder.constraint.trie_constraint import OFF_TRIE, TrieConstraint

VOCAB = 60


def _constraint(seed: int) -> TrieConstraint:
    rng = random.Random(seed)
    layout = SidLayout.parse("10:8,18:8,26:8;begin=40;end=41")
    entries = [CatalogEntry(f"i{i}", tuple(rng.randrange(8) for _ in range(3))) for i in range(60)]
    return TrieConstraint(SidTrie.build(entries, layout), "v1", "cpu")


def test_mask_allows_exactly_children_or_eos() -> None:
    c = _constraint(0)
    eos = torch.tensor([3, 5])
    nodes = torch.tensor([*range(c.trie.num_nodes), OFF_TRIE])
    mask = c.mask(nodes, eos, VOCAB)
    for row, node in enumerate(nodes.tolist()):
        allowed = set(torch.nonzero(mask[row] == 0).squeeze(1).tolist())
        if node >= 0 and len(c.trie.children(node)[0]):
            assert allowed == set(c.trie.children(node)[0].tolist())
        else:
            assert allowed == {3}
    assert torch.isinf(mask[mask != 0]).all()


def test_allowed_tokens_are_the_mask_as_lists() -> None:
    c = _constraint(4)
    nodes = torch.tensor([*range(c.trie.num_nodes), OFF_TRIE])
    for eos in (torch.tensor([3, 5]), torch.tensor([], dtype=torch.int64)):
        mask = c.mask(nodes, eos, VOCAB)
        tokens, valid = c.allowed_tokens(nodes, eos)
        assert tokens.shape == valid.shape == (len(nodes), c.max_fanout)
        for row in range(len(nodes)):
            listed = tokens[row][valid[row]].tolist()
            assert len(listed) == len(set(listed))
            assert set(listed) == set(torch.nonzero(mask[row] == 0).squeeze(1).tolist())


def test_advance_matches_child_lookup() -> None:
    c = _constraint(1)
    rng = random.Random(2)
    nodes = [rng.randrange(-1, c.trie.num_nodes) for _ in range(300)]
    tokens = [rng.randrange(VOCAB) for _ in range(300)]
    got = c.advance(torch.tensor(nodes), torch.tensor(tokens)).tolist()
    for node, token, child in zip(nodes, tokens, got, strict=True):
        expected = c.trie.child(node, token) if node >= 0 else -1
        assert child == (expected if expected >= 0 else OFF_TRIE)


def test_start_node_and_path_length_depend_on_begin_token() -> None:
    c = _constraint(3)
    assert c.path_length((1, 2)) == 5 and c.path_length((1, 40)) == 4
    assert c.start_node((1, 40)) == 1 and c.start_node((1, 2)) == 0
    sid = c.trie.sids[0].tolist()
    path = [10 + sid[0], 18 + sid[1], 26 + sid[2], 41, 3]
    assert c.items_for_paths((9, 40), [path, [10 + sid[0], 0]]) == [c.trie.lookup_sid(sid), []]
