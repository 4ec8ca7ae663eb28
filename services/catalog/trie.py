"""SID trie over token ids: which SID tokens may follow a decoding prefix, and which items a
complete SID names.

A path is ``[begin?] + [tok(level 0, c0), ..., tok(level L-1, c_{L-1})] + [end?]``.
Nodes are numbered breadth-first, depth by depth, so depth ``d`` owns node ids
``depth_offsets[d] .. depth_offsets[d+1]-1``; depth 0 is the root (node 0). With a begin token
the root is "before <|sid_begin|>" and its only child (node 1) is "after <|sid_begin|>";
without one the root is the start of the codes. Leaves (nodes without children) are complete
paths: after the last code, or after the end token when the layout has one.

Edges leaving depth ``d`` all carry tokens from one range, ``token_ranges[d] = (base, size)``:
a level's code range, or ``(token_id, 1)`` for the begin/end steps. ``dense_tables[d]`` (when
``nodes_at_depth * size <= dense_cell_budget``) is an int32 array ``[nodes_at_depth, size]``
with ``table[node - depth_offsets[d], token - base]`` = child node or -1; None otherwise and
always None for the leaf depth.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.string_table import StringTable
from widebeam.services.catalog.trie_build import (
    build_arrays,
    dense_tables,
    entries_to_columns,
    step_ranges,
)
from widebeam.services.catalog.trie_io import content_hash, pack_arrays, unpack_arrays
from widebeam.services.catalog.types import CatalogEntry, CatalogError

DEFAULT_DENSE_CELL_BUDGET = 1 << 24


class SidTrie:
    """Immutable SID trie; construct with :meth:`build` or :meth:`from_arrays`."""

    def __init__(
        self,
        layout: SidLayout,
        depth_offsets: np.ndarray,  # [num_depths+1] int64
        child_offsets: np.ndarray,  # [num_nodes+1] int64, CSR row pointers
        child_tokens: np.ndarray,  # [num_edges] int32, ascending within each node
        child_nodes: np.ndarray,  # [num_edges] int32
        leaf_sid: np.ndarray,  # [num_nodes] int32, index into sids at leaves, else -1
        sids: np.ndarray,  # [num_sids, L] int32, unique, lexicographically sorted
        sid_item_offsets: np.ndarray,  # [num_sids+1] int64, groups item_ids by SID
        item_ids: StringTable | Sequence[str],  # [num_items], input order kept within one SID
        dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET,
    ) -> None:
        self.layout = layout
        self.depth_offsets = depth_offsets
        self.child_offsets = child_offsets
        self.child_tokens = child_tokens
        self.child_nodes = child_nodes
        self.leaf_sid = leaf_sid
        self.sids = sids
        self.sid_item_offsets = sid_item_offsets
        # One UTF-8 buffer + offsets, not a list of str: ~13 B an item instead of ~70;
        # `item_ids[a:b]` and `item_ids[i]` make strings only for the items asked for.
        self.item_ids: StringTable = StringTable.from_strings(item_ids)
        self.dense_cell_budget = dense_cell_budget
        self.token_ranges: list[tuple[int, int]] = step_ranges(layout)
        self.dense_tables: list[np.ndarray | None] = dense_tables(
            depth_offsets, child_offsets, child_tokens, child_nodes, self.token_ranges,
            dense_cell_budget,
        )  # fmt: skip
        for arr in (*self._arrays(), *(t for t in self.dense_tables if t is not None)):
            arr.setflags(write=False)  # trie versions are immutable and shared across requests

    @classmethod
    def build(
        cls,
        entries: Sequence[CatalogEntry],
        layout: SidLayout,
        dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET,
    ) -> SidTrie:
        """Build from (item_id, sid) entries; raises CatalogError on entries the layout rejects."""
        item_ids, codes = entries_to_columns(entries, layout)
        a = build_arrays(item_ids, codes, layout)
        return cls(layout, *a, dense_cell_budget=dense_cell_budget)

    # -- shape ------------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.leaf_sid)

    @property
    def num_edges(self) -> int:
        return len(self.child_tokens)

    @property
    def num_depths(self) -> int:
        """Node depths including the root and leaf depths (= layout.path_length(True) + 1)."""
        return len(self.depth_offsets) - 1

    @property
    def num_sids(self) -> int:
        return len(self.sids)

    @property
    def num_items(self) -> int:
        return len(self.item_ids)

    @cached_property
    def max_branching(self) -> int:
        return int(np.diff(self.child_offsets).max())

    def start_node(self, prompt_ends_with_begin: bool) -> int:
        """Node to start decoding from; after-begin node when the prompt already holds begin."""
        if self.layout.begin_token_id is not None and prompt_ends_with_begin:
            return 1
        return 0

    # -- navigation ---------------------------------------------------------------------------

    def children(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """(child tokens ascending int32, child nodes int32) of ``node`` (read-only views)."""
        lo, hi = self.child_offsets[node], self.child_offsets[node + 1]
        return self.child_tokens[lo:hi], self.child_nodes[lo:hi]

    def child(self, node: int, token: int) -> int:
        """Child of ``node`` reached by ``token``, or -1."""
        tokens, nodes = self.children(node)
        i = int(np.searchsorted(tokens, token))
        return int(nodes[i]) if i < len(tokens) and tokens[i] == token else -1

    def walk(self, tokens: Sequence[int], start: int = 0) -> int:
        """Node reached from ``start`` by ``tokens``, or -1 when the path leaves the trie."""
        node = start
        for tok in tokens:
            node = self.child(node, int(tok))
            if node < 0:
                return -1
        return node

    def is_leaf(self, node: int) -> bool:
        return bool(self.leaf_sid[node] >= 0)

    def items_for_leaf(self, node: int) -> list[str]:
        """Items named by the complete SID path ending at leaf ``node``."""
        sid = int(self.leaf_sid[node])
        if sid < 0:
            raise ValueError(f"trie node {node} is not a leaf (complete SID path)")
        lo, hi = self.sid_item_offsets[sid], self.sid_item_offsets[sid + 1]
        return self.item_ids[lo:hi]

    def lookup_sid(self, codes: Sequence[int]) -> list[str]:
        """Items whose SID is ``codes``; [] when no item has it (or it is malformed)."""
        if len(codes) != self.layout.depth:
            return []
        path = []
        for lvl, (code, level) in enumerate(zip(codes, self.layout.levels, strict=True)):
            if not 0 <= code < level.size:
                return []
            path.append(self.layout.code_to_token(lvl, int(code)))
        if self.layout.end_token_id is not None:
            path.append(self.layout.end_token_id)
        node = self.walk(path, start=self.start_node(prompt_ends_with_begin=True))
        return [] if node < 0 else self.items_for_leaf(node)

    # -- reporting / identity -----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "nodes_per_depth": np.diff(self.depth_offsets).tolist(),
            "num_nodes": self.num_nodes,
            "num_edges": self.num_edges,
            "max_branching": self.max_branching,
            "num_items": self.num_items,
            "num_sids": self.num_sids,
            "dense_depths": [d for d, t in enumerate(self.dense_tables) if t is not None],
        }

    @cached_property
    def content_hash(self) -> str:
        """sha256 hex of layout + (item, SID) content; independent of catalog input order."""
        return content_hash(self.layout, self.sids, self.sid_item_offsets, self.item_ids)

    # -- artifact -----------------------------------------------------------------------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Self-contained numpy arrays (layout included) for the published artifact."""
        return pack_arrays(self.layout, *self._arrays(), self.item_ids)

    @classmethod
    def from_arrays(
        cls,
        arrays: dict[str, np.ndarray],
        dense_cell_budget: int = DEFAULT_DENSE_CELL_BUDGET,
        copy: bool = True,
    ) -> SidTrie:
        """Inverse of :meth:`to_arrays`; dense tables are rebuilt under ``dense_cell_budget``.
        ``copy=False``: keep views of ``arrays`` (a buffer the caller hands over)."""
        try:
            layout, fields, item_ids = unpack_arrays(arrays, copy=copy)
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise CatalogError(f"malformed trie arrays: {exc}") from exc
        return cls(layout, *fields, item_ids, dense_cell_budget=dense_cell_budget)

    def _arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.depth_offsets,
            self.child_offsets,
            self.child_tokens,
            self.child_nodes,
            self.leaf_sid,
            self.sids,
            self.sid_item_offsets,
        )
