"""KV reservations with prompt-prefix reuse: a request whose prompt starts with pages already
cached reads their KV instead of computing it again, and its own full prompt pages are cached
for the requests after it.

Admission takes, in order: the longest cached page-aligned prefix of the prompt (never its last
token: prefill needs that token's hidden state), pages for the rest of the prompt and the
private slots — from the free list, then by evicting unheld cached prefixes, least recently
used first. A running request's pages are never evicted, so admission stays all-or-nothing as
without the cache. With `enabled=False` every request reserves all its slots from the free
list and nothing is cached (the engine as before). The KV a cached page holds depends only on
the tokens up to it (causal attention, positions from 0), which is why reuse is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from widebeam.services.decoder.kv.kv_reservation import KVReservation
from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.kv.prefix_tree import PrefixNode, PrefixTree


class PrefixCacheStats(NamedTuple):
    prompt_tokens: int  # prompt tokens of every admitted request
    hit_tokens: int  # of those, tokens read from cached prefixes instead of prefilled
    cached_pages: int  # pages the tree holds now (held by running requests or not)
    unheld_pages: int  # of those, pages eviction may give back
    evicted_pages: int  # cached pages evicted so far

    @property
    def hit_ratio(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class PrefixCache:
    def __init__(self, pages: PageAllocator, enabled: bool = True) -> None:
        self.pages = pages
        self.enabled = enabled
        self.tree = PrefixTree(pages.page_size)
        self.prompt_tokens = 0
        self.hit_tokens = 0

    @property
    def free_slots(self) -> int:
        """Slots a new request could reserve: free pages plus unheld cached ones."""
        return (self.pages.free_pages + self.tree.unheld) * self.pages.page_size

    def stats(self) -> PrefixCacheStats:
        tree = self.tree
        return PrefixCacheStats(
            self.prompt_tokens, self.hit_tokens, tree.num_nodes, tree.unheld, tree.evicted
        )

    def _match(self, prompt: Sequence[int]) -> list[PrefixNode]:
        # At least the prompt's last token is prefilled: its hidden state starts the search.
        tree = self.tree
        return tree.match(tree.blocks(prompt, (len(prompt) - 1) // self.pages.page_size))

    def cached_tokens(self, prompt: Sequence[int]) -> int:
        """The prompt tokens a reservation now would find cached (prefill skips them)."""
        return len(self._match(prompt)) * self.pages.page_size if self.enabled else 0

    def reserve(self, prompt: Sequence[int], kv_slots: int) -> KVReservation | None:
        """The pages for a request of `prompt` needing `kv_slots` slots in all (prompt first),
        or None, changing nothing, when they cannot be had now."""
        size = self.pages.page_size
        if not self.enabled:
            if not self.pages.can_reserve(kv_slots):
                return None
            own = tuple(self.pages.reserve(kv_slots))
            return KVReservation(own, 0, size, owned=own)
        tree = self.tree
        matched = self._match(prompt)
        tree.acquire(matched)
        need = self.pages.pages_for(kv_slots - len(matched) * size)
        shortfall = need - self.pages.free_pages
        if shortfall > tree.unheld:
            tree.release(matched)
            return None
        if shortfall > 0:
            self.pages.release(tree.evict(shortfall))
        own = self.pages.reserve_pages(need)
        held = list(matched)
        parent = matched[-1] if matched else tree.root
        new_blocks = tree.blocks(prompt, len(prompt) // size)[len(matched) :]
        for block, page in zip(new_blocks, own, strict=False):
            node = tree.insert(parent, block, page)
            if node is None:  # cached already (it was past the match limit): keep the page
                break
            held.append(node)
            parent = node
        donated = len(held) - len(matched)
        self.prompt_tokens += len(prompt)
        self.hit_tokens += len(matched) * size
        return KVReservation(
            tuple(node.page for node in matched) + tuple(own),
            len(matched),
            size,
            held=tuple(held),
            owned=tuple(own[donated:]),
        )

    def release(self, reservation: KVReservation) -> None:
        """A finished request's pages: its prefix pages stay cached, the rest are free again."""
        self.tree.release(reservation.held)
        self.pages.release(list(reservation.owned))
