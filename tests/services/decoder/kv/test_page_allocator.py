from __future__ import annotations

import pytest
import torch

from widebeam.services.decoder.kv.kv_cache import slots_of_pages
from widebeam.services.decoder.kv.page_allocator import PageAllocator


def test_reserve_and_release_account_pages() -> None:
    pages = PageAllocator(num_pages=10, page_size=16)
    assert pages.capacity_slots == 160
    first = pages.reserve(33)  # 3 pages
    assert len(first) == 3 and pages.free_pages == 7
    second = pages.reserve(16 * 7)
    assert pages.free_pages == 0 and not set(first) & set(second)
    assert not pages.can_reserve(1)
    with pytest.raises(RuntimeError):
        pages.reserve(1)
    pages.release(first)
    assert pages.free_slots == 48 and pages.can_reserve(48) and not pages.can_reserve(49)


def test_slots_of_pages_are_distinct_and_in_page_order() -> None:
    slots = slots_of_pages([3, 0], page_size=4, device="cpu")
    assert slots.tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    assert slots.dtype == torch.int64


def test_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        PageAllocator(0, 16)
