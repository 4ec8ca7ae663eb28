"""The prompt-prefix tree: which KV pages already hold which page-aligned prompt prefixes.

A node is one full page of prompt tokens (`page_size` token ids) under the node of the page
before it, so a path from the root spells a prompt prefix and its nodes' pages hold that
prefix's KV (positions 0, 1, … as every prompt starts at position 0). Nodes are counted by the
running requests that read them (`refs`); a request holds every node of its path, so a node's
count is never below its children's, and nodes nobody holds form whole subtrees that eviction
peels off leaf first, least recently used first. Plain Python: pages are ids, nothing here
touches a tensor.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

Block = tuple[int, ...]  # page_size token ids


@dataclass(eq=False)
class PrefixNode:
    block: Block
    page: int  # the KV page holding this block's tokens (-1: the root, which holds none)
    parent: PrefixNode | None
    children: dict[Block, PrefixNode] = field(default_factory=dict)
    refs: int = 0  # running requests reading this page
    last_used: int = 0  # tick of the last release (LRU order among unheld nodes)


class PrefixTree:
    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.root = PrefixNode((), -1, None)
        self.num_nodes = 0
        self.unheld = 0  # nodes with refs == 0: the pages eviction can give back
        self.evicted = 0  # nodes evicted so far
        self._ticks = itertools.count(1)
        # (last_used, tie, node) of nodes that were unheld leaves when pushed; stale entries are
        # skipped on pop (the node was taken again, got a child or was used since).
        self._lru: list[tuple[int, int, PrefixNode]] = []
        self._ties = itertools.count()

    def blocks(self, tokens: Sequence[int], limit: int) -> list[Block]:
        """The first `limit` full pages of `tokens` (fewer if the prompt is shorter)."""
        size = self.page_size
        count = min(limit, len(tokens) // size)
        return [tuple(tokens[i * size : (i + 1) * size]) for i in range(count)]

    def match(self, blocks: Sequence[Block]) -> list[PrefixNode]:
        """The longest path of cached nodes spelling `blocks`' first blocks."""
        path: list[PrefixNode] = []
        node = self.root
        for block in blocks:
            child = node.children.get(block)
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def acquire(self, nodes: Sequence[PrefixNode]) -> None:
        """A request starts reading these nodes' pages: none of them can be evicted now."""
        for node in nodes:
            if node.refs == 0:
                self.unheld -= 1
            node.refs += 1

    def release(self, nodes: Sequence[PrefixNode]) -> None:
        """A request is done with these nodes; unheld ones stay cached until evicted."""
        tick = next(self._ticks)
        for node in nodes:
            if node.refs <= 0:
                raise RuntimeError(f"prefix page {node.page} released more often than acquired")
            node.refs -= 1
            node.last_used = tick
            if node.refs == 0:
                self.unheld += 1
                if not node.children:
                    self._push(node)

    def insert(self, parent: PrefixNode, block: Block, page: int) -> PrefixNode | None:
        """Cache `page` as the KV of `block` after `parent`'s prefix, held once by the caller;
        None when that block is cached already (the caller keeps its page to itself)."""
        if len(block) != self.page_size:
            raise ValueError(f"a prefix block is {self.page_size} tokens, got {len(block)}")
        if block in parent.children:
            return None
        node = PrefixNode(block, page, parent, refs=1)
        parent.children[block] = node
        self.num_nodes += 1
        return node

    def evict(self, pages_wanted: int) -> list[int]:
        """Drop up to `pages_wanted` unheld nodes, least recently used leaves first (a parent
        becomes a leaf once its children are gone); returns their pages."""
        freed: list[int] = []
        while len(freed) < pages_wanted and self._lru:
            entry = heapq.heappop(self._lru)
            if not _evictable(entry):
                continue  # stale: held again, grew a child, used since, or evicted already
            node = entry[2]
            parent = node.parent
            assert parent is not None
            del parent.children[node.block]
            node.parent = None
            self.num_nodes -= 1
            self.unheld -= 1
            self.evicted += 1
            freed.append(node.page)
            if parent is not self.root and parent.refs == 0 and not parent.children:
                self._push(parent)
        return freed

    def _push(self, node: PrefixNode) -> None:
        heapq.heappush(self._lru, (node.last_used, next(self._ties), node))
        if len(self._lru) > 2 * self.num_nodes + 64:  # mostly stale entries: keep it bounded
            self._lru = [entry for entry in self._lru if _evictable(entry)]
            heapq.heapify(self._lru)


def _evictable(entry: tuple[int, int, PrefixNode]) -> bool:
    last_used, _tie, node = entry
    live = node.parent is not None and not node.refs and not node.children
    return live and node.last_used == last_used
