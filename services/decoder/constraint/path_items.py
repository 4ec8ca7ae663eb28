"""Items named by finished beams: every beam's output path walked through the catalog trie at
once on the host (one vectorised child lookup per SID level), since a wide request finishes
with thousands of beams and a per-token Python walk would cost more than its decode steps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.constraint.trie_arrays import constraint_arrays


class PathItems:
    def __init__(
        self,
        trie: SidTrie,
        edge_keys: np.ndarray | None = None,  # [edges] int64, as `constraint_arrays` derives
        key_base: int | None = None,
    ) -> None:
        self.trie = trie
        if edge_keys is None or key_base is None:
            derived = constraint_arrays(trie)
            edge_keys, key_base = derived["edge_keys"], int(derived["key_base"])
        self.key_base = key_base
        self.edge_keys = edge_keys  # [edges] int64: node * key_base + token, ascending
        self.edge_child = trie.child_nodes  # [edges] int32 (the trie's own array, not a copy)

    def children(
        self,
        nodes: np.ndarray,  # [B] int64, >= 0
        tokens: np.ndarray,  # [B] int64
    ) -> np.ndarray:  # [B] int64 child node, -1 where the token is no child
        if not self.edge_keys.size:
            return np.full_like(nodes, -1)
        keys = nodes * self.key_base + tokens
        pos = np.minimum(np.searchsorted(self.edge_keys, keys), self.edge_keys.size - 1)
        found = (tokens >= 0) & (tokens < self.key_base) & (self.edge_keys[pos] == keys)
        return np.where(found, self.edge_child[pos], -1).astype(np.int64)

    def items(
        self,
        start_node: int,
        paths: Sequence[Sequence[int]] | np.ndarray,  # or [m, L] int64, -1 after each end
    ) -> list[list[str]]:
        """Per path: the items of the complete SID it spells from `start_node` (tokens after
        the SID's leaf, such as its end token or EOS, are ignored), or [] when it spells
        none."""
        if len(paths) == 0:
            return []
        if isinstance(paths, np.ndarray):
            tokens = paths
        else:
            depth = max(len(p) for p in paths)
            tokens = np.full((len(paths), depth), -1, dtype=np.int64)  # -1: the path has ended
            for i, path in enumerate(paths):
                tokens[i, : len(path)] = path
        depth = tokens.shape[1]
        nodes = np.full(len(paths), start_node, dtype=np.int64)
        leaf_sid = self.trie.leaf_sid
        for level in range(depth):
            step = tokens[:, level]
            moving = (nodes >= 0) & (step >= 0) & (leaf_sid[np.maximum(nodes, 0)] < 0)
            if not moving.any():
                break
            nodes[moving] = self.children(nodes[moving], step[moving])
        sids = np.where(nodes >= 0, leaf_sid[np.maximum(nodes, 0)], -1)  # [m]
        offsets = self.trie.sid_item_offsets
        known = sids >= 0
        starts = np.where(known, offsets[np.maximum(sids, 0)], 0)
        stops = np.where(known, offsets[np.maximum(sids, 0) + 1], 0)
        return self.trie.item_ids.take_ranges(starts, stops)
