"""A constraint built from arrays another process derived is the one built from the trie alone;
arrays that do not fit the trie are refused by name."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry
from widebeam.services.decoder.constraint.trie_arrays import constraint_arrays
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint


def trie(seed: int, items: int = 80) -> SidTrie:
    rng = random.Random(seed)
    layout = SidLayout.parse("10:8,18:8,26:8;begin=40;end=41")
    entries = [CatalogEntry(f"i{i}", tuple(rng.randrange(8) for _ in range(3)))
               for i in range(items)]  # fmt: skip
    return SidTrie.build(entries, layout)


def test_derived_arrays_give_the_same_constraint() -> None:
    t = trie(0)
    here = TrieConstraint(t, "v", "cpu")
    given = TrieConstraint(t, "v", "cpu", derived=constraint_arrays(t))
    for name in ("child_offsets", "child_tokens", "child_nodes", "edge_keys"):
        assert torch.equal(getattr(here, name), getattr(given, name)), name
        assert getattr(given, name).dtype == torch.int64
    assert (here.key_base, here.max_fanout) == (given.key_base, given.max_fanout)
    assert here.max_fanout == t.max_branching
    nodes = torch.arange(t.num_nodes)
    tokens = torch.randint(0, 60, (t.num_nodes,))
    assert torch.equal(here.advance(nodes, tokens), given.advance(nodes, tokens))
    paths = np.asarray([[40, 10 + c0, 18 + c1, 26 + c2, 41] for c0, c1, c2 in t.sids.tolist()])
    assert given.items_for_paths((), paths) == here.items_for_paths((), paths)


def test_keys_ascend_and_name_each_edge() -> None:
    t = trie(1)
    arrays = constraint_arrays(t)
    keys, base = arrays["edge_keys"], int(arrays["key_base"])
    assert (np.diff(keys) > 0).all()
    nodes = np.repeat(np.arange(t.num_nodes), np.diff(t.child_offsets))
    np.testing.assert_array_equal(keys // base, nodes)
    np.testing.assert_array_equal(keys % base, t.child_tokens)


@pytest.mark.parametrize(
    ("name", "bad"),
    [("edge_keys", lambda a: a[:-1]), ("child_nodes", lambda a: a.astype(np.int32)),
     ("max_fanout", lambda a: np.asarray([a]))],
)  # fmt: skip
def test_arrays_that_do_not_fit_are_refused(name: str, bad) -> None:
    t = trie(2)
    arrays = constraint_arrays(t)
    arrays[name] = bad(arrays[name])
    with pytest.raises(ValueError, match=f"derived trie array '{name}'"):
        TrieConstraint(t, "v", "cpu", derived=arrays)
    del arrays[name]
    with pytest.raises(ValueError, match=f"'{name}': expected int64.*missing"):
        TrieConstraint(t, "v", "cpu", derived=arrays)
