"""Items named by finished beams: every beam's output path walked through the catalog trie at
once on the host (one vectorised child lookup per SID level), since a wide request finishes
with thousands of beams and a per-token Python walk would cost more than its decode steps."""

from __future__ import annotations

import bisect
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
        # Searching all keys but the last lands a key past the last edge on that edge (where it
        # then fails the equality test), so a lookup needs no clamp: a view, not a copy.
        self._probe_keys = edge_keys[:-1]  # [edges - 1] int64
        self._depth_starts: list[int] = trie.depth_offsets.tolist()
        self._leaf_depth = _only_leaf_depth(trie)

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
        tokens = _token_matrix(paths)
        steps = self._steps_to_leaves(start_node)
        if steps is not None and (steps > tokens.shape[1] or (steps and not self.edge_keys.size)):
            return [[] for _ in range(len(tokens))]
        head = None if steps is None else tokens[:, :steps]  # [m, steps]
        # A negative token is skipped rather than followed, and one past the key base would
        # spell another node's edge: paths with neither on the way down (every finished
        # beam's: -1 comes only after its end) reach their leaf in exactly `steps` tokens.
        if head is not None and (not steps or (head.min() >= 0 and head.max() < self.key_base)):
            sids = self._leaf_sids(start_node, head)
        else:
            sids = self._walked_sids(start_node, tokens)
        offsets = self.trie.sid_item_offsets
        safe = np.maximum(sids, 0)
        starts = offsets[safe]
        stops = np.where(sids >= 0, offsets[safe + 1], starts)  # no items for no SID
        return self.trie.item_ids.take_ranges(starts, stops)

    def _steps_to_leaves(self, start_node: int) -> int | None:
        """Tokens from `start_node` to a leaf when every path of that many tokens ends on one
        and no shorter path does (a trie whose leaves are exactly its deepest nodes, as every
        built trie's are); None otherwise: such paths take the per-level leaf test."""
        if self._leaf_depth is None or not 0 <= start_node < self.trie.num_nodes:
            return None
        return self._leaf_depth - (bisect.bisect_right(self._depth_starts, start_node) - 1)

    def _leaf_sids(
        self,
        start_node: int,
        tokens: np.ndarray,  # [m, steps] int64 in [0, key_base): each path's tokens to its leaf
    ) -> np.ndarray:  # [m] SID row of each path's leaf, -1 where it reaches none
        """The walk of `steps` tokens with no leaf test on the way (only the last depth holds
        leaves): a few numpy calls a level for all paths together."""
        nodes = np.full(len(tokens), start_node, dtype=np.int64)
        for level in range(tokens.shape[1]):
            keys = np.multiply(nodes, self.key_base, dtype=np.int64)
            keys += tokens[:, level]
            pos = self._probe_keys.searchsorted(keys)
            nodes = np.where(self.edge_keys[pos] == keys, self.edge_child[pos], -1)
        # -1 reads node 0's entry, -1 too: the root is a leaf only in a trie of no depth,
        # where no path takes a step to miss.
        return self.trie.leaf_sid[np.maximum(nodes, 0)]

    def _walked_sids(
        self,
        start_node: int,
        tokens: np.ndarray,  # [m, L] int64, -1 after each end
    ) -> np.ndarray:  # [m] SID row of each path's leaf, -1 where it reaches none
        """Level by level, each path stopping at the first leaf it reaches and skipping
        negative tokens (any trie, any path)."""
        depth = tokens.shape[1]
        nodes = np.full(len(tokens), start_node, dtype=np.int64)
        leaf_sid = self.trie.leaf_sid
        for level in range(depth):
            step = tokens[:, level]
            moving = (nodes >= 0) & (step >= 0) & (leaf_sid[np.maximum(nodes, 0)] < 0)
            if not moving.any():
                break
            nodes[moving] = self.children(nodes[moving], step[moving])
        return np.where(nodes >= 0, leaf_sid[np.maximum(nodes, 0)], -1)


def _token_matrix(
    paths: Sequence[Sequence[int]] | np.ndarray,
) -> np.ndarray:  # [m, L] int64, -1 after each path's end
    if isinstance(paths, np.ndarray):
        return paths.astype(np.int64, copy=False)
    depth = max(len(p) for p in paths)
    tokens = np.full((len(paths), depth), -1, dtype=np.int64)  # -1: the path has ended
    for i, path in enumerate(paths):
        tokens[i, : len(path)] = path
    return tokens


def _only_leaf_depth(trie: SidTrie) -> int | None:
    """The deepest depth when it holds every leaf and nothing else does; None otherwise."""
    if trie.num_depths < 1:
        return None
    deepest = int(trie.depth_offsets[-2])
    leaf_sid = trie.leaf_sid
    if (leaf_sid[:deepest] >= 0).any() or (leaf_sid[deepest:] < 0).any():
        return None
    return trie.num_depths - 1
