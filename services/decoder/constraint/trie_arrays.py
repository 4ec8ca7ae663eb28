"""The host arrays a `TrieConstraint` derives from a trie, as one function of the trie alone.

At 10M items they are ~0.4 GB of int64 work (edge keys, widened child tokens and nodes): seconds
of CPU. A decoder that follows a catalog has its load child run this (`CatalogSubscriber`'s
`derive`) and maps the result, so the serving process spends none of that CPU beside its
serving threads; a trie built in-process derives them here on the spot.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.trie_build import csr_rows


def constraint_arrays(trie: SidTrie) -> dict[str, np.ndarray]:
    """``child_tokens`` / ``child_nodes`` [edges] int64, ``edge_keys`` [edges] int64 (node *
    key_base + token: ascending, as the CSR is node-major and token-sorted), and the scalars
    ``key_base`` and ``max_fanout`` as 0-d int64 arrays."""
    tokens = trie.child_tokens.astype(np.int64)
    key_base = int(tokens.max()) + 1 if tokens.size else 1
    keys = csr_rows(trie.child_offsets)  # [edges] the node each edge leaves
    keys *= key_base
    keys += tokens
    fanout = np.diff(trie.child_offsets)
    return {
        "child_tokens": tokens,
        "child_nodes": trie.child_nodes.astype(np.int64),
        "edge_keys": keys,
        "key_base": np.asarray(key_base, dtype=np.int64),
        "max_fanout": np.asarray(int(fanout.max()) if fanout.size else 0, dtype=np.int64),
    }


def checked(trie: SidTrie, arrays: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
    """`arrays` when they have the names, dtypes and shapes `constraint_arrays(trie)` gives;
    ValueError naming the first that does not (arrays another process derived)."""
    shapes = {"child_tokens": (trie.num_edges,), "child_nodes": (trie.num_edges,),
              "edge_keys": (trie.num_edges,), "key_base": (), "max_fanout": ()}  # fmt: skip
    for name, shape in shapes.items():
        array = arrays.get(name)
        if array is None or array.dtype != np.int64 or array.shape != shape:
            got = "missing" if array is None else f"{array.dtype}{list(array.shape)}"
            raise ValueError(f"derived trie array {name!r}: expected int64{list(shape)}, {got}")
    return arrays
