"""What an admitted request holds of the KV cache, and gives back when it finishes."""

from __future__ import annotations

from dataclasses import dataclass

from widebeam.services.decoder.kv.prefix_tree import PrefixNode


@dataclass(frozen=True)
class KVReservation:
    """`pages` address the request's slots in order: its prompt from slot 0, then its private
    (generated-token) slots. The first `cached_pages` of them are prefix pages other requests
    computed (read only); the request computes the rest of its prompt."""

    pages: tuple[int, ...]
    cached_pages: int
    page_size: int
    held: tuple[PrefixNode, ...] = ()  # prefix-tree nodes it reads or put there (one ref each)
    owned: tuple[int, ...] = ()  # its pages the tree does not hold: back to the free list

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens whose KV is already in the cache: prefill skips them."""
        return self.cached_pages * self.page_size
