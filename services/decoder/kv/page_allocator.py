"""KV-slot accounting: a free list of fixed-size pages (plain Python, no tensors).

A request reserves every slot it can ever need at admission (prompt + k × max_new_tokens), so
pages are only taken in `reserve` and only given back in `release`. Pages avoid the
fragmentation a contiguous-range allocator would suffer under mixed request sizes.
"""

from __future__ import annotations


class PageAllocator:
    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages <= 0 or page_size <= 0:
            raise ValueError("num_pages and page_size must be positive")
        self.num_pages = num_pages
        self.page_size = page_size
        # Low page ids first keeps small workloads inside a compact region of the cache.
        self._free: list[int] = list(range(num_pages - 1, -1, -1))

    @property
    def capacity_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def free_pages(self) -> int:
        return len(self._free)

    @property
    def free_slots(self) -> int:
        return len(self._free) * self.page_size

    def pages_for(self, num_slots: int) -> int:
        return -(-num_slots // self.page_size)

    def can_reserve(self, num_slots: int) -> bool:
        return self.pages_for(num_slots) <= len(self._free)

    def reserve(self, num_slots: int) -> list[int]:
        """Take the pages holding `num_slots` slots; raises if they are not free."""
        if self.pages_for(num_slots) > len(self._free):
            raise RuntimeError(f"cannot reserve {num_slots} KV slots: {self.free_slots} free")
        return self.reserve_pages(self.pages_for(num_slots))

    def reserve_pages(self, need: int) -> list[int]:
        """Take `need` pages; raises if they are not free."""
        if need > len(self._free):
            raise RuntimeError(f"cannot reserve {need} KV pages: {len(self._free)} free")
        taken = self._free[len(self._free) - need :]
        del self._free[len(self._free) - need :]
        taken.reverse()
        return taken

    def release(self, pages: list[int]) -> None:
        self._free.extend(reversed(pages))
