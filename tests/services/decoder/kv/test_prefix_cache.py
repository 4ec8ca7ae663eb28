"""Reservations with prefix reuse: shared pages, donated pages, eviction under the KV budget."""

from __future__ import annotations

from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.kv.prefix_cache import PrefixCache


def test_a_second_prompt_reads_the_first_ones_full_pages() -> None:
    cache = PrefixCache(PageAllocator(10, 4))
    first = cache.reserve(list(range(10)), 14)  # 4 pages; its 2 full prompt pages are cached
    assert first is not None and first.cached_pages == 0 and len(first.pages) == 4
    assert len(first.owned) == 2 and first.owned == first.pages[2:]
    second = cache.reserve([*range(8), 99, 98], 14)
    assert second is not None and second.cached_tokens == 8
    assert second.pages[:2] == first.pages[:2]  # shared, not reserved again
    assert cache.pages.free_pages == 10 - 4 - 2  # the 6 uncached slots take 2 pages
    stats = cache.stats()
    assert (stats.prompt_tokens, stats.hit_tokens, stats.cached_pages) == (20, 8, 2)
    assert stats.hit_ratio == 0.4


def test_the_last_prompt_token_is_never_a_hit() -> None:
    cache = PrefixCache(PageAllocator(10, 4))
    assert cache.reserve(list(range(8)), 8) is not None  # both pages cached
    again = cache.reserve(list(range(8)), 8)
    assert again is not None and again.cached_tokens == 4  # the 8th token is prefilled
    assert again.owned == again.pages[1:]  # its copy of page 2 stays its own


def test_release_keeps_prefix_pages_cached_and_frees_the_rest() -> None:
    cache = PrefixCache(PageAllocator(4, 4))
    res = cache.reserve(list(range(9)), 12)  # 3 pages, 2 cached
    assert res is not None
    cache.release(res)
    assert cache.pages.free_pages == 2 and cache.free_slots == 16
    assert cache.stats().unheld_pages == 2


def test_eviction_frees_unheld_pages_for_a_new_request_never_held_ones() -> None:
    cache = PrefixCache(PageAllocator(4, 4))
    held = cache.reserve([1] * 9, 9)  # 3 pages, 2 cached and held
    gone = cache.reserve([2] * 5, 5)  # 2 pages... only 1 is free
    assert held is not None and gone is None  # refused: held pages are not evictable
    assert cache.pages.free_pages == 1 and cache.stats().hit_tokens == 0
    cache.release(held)
    fresh = cache.reserve([2] * 13, 16)  # needs all 4 pages: both cached ones are evicted
    assert fresh is not None and fresh.cached_pages == 0
    assert cache.stats().cached_pages == 3  # its own 3 full prompt pages


def test_disabled_reserves_everything_and_caches_nothing() -> None:
    cache = PrefixCache(PageAllocator(6, 4), enabled=False)
    a = cache.reserve(list(range(9)), 9)
    b = cache.reserve(list(range(9)), 9)
    assert a is not None and b is not None and set(a.pages).isdisjoint(b.pages)
    assert a.owned == a.pages and a.cached_tokens == 0
    assert cache.reserve([1], 1) is None  # 3 + 3 pages: none left
    cache.release(a)
    assert cache.pages.free_pages == 3 and cache.stats().cached_pages == 0
