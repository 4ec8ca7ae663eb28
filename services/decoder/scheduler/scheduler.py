"""Admission policy: FIFO, a request enters only when all it can ever need is free.

Budget per request: k rows and prompt + k x max_new_tokens KV slots, both reserved at admission
and held until the request finishes, so a running request is never retracted or aborted for
memory. Strict FIFO keeps wide requests from starving behind a stream of narrow ones.

Plain Python: a request is anything with the few numbers the policy weighs (`Schedulable`); the
engine's `Request` is one.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

from widebeam.services.decoder.kv.page_allocator import PageAllocator


class Schedulable(Protocol):
    """What admission reads of a request, and the two fields it writes."""

    pages: list[int]  # the KV pages reserved for it (empty until admitted, and once finished)
    finished: bool

    @property
    def request_id(self) -> str: ...

    @property
    def num_rows(self) -> int: ...  # k

    @property
    def prompt_len(self) -> int: ...

    @property
    def kv_slots(self) -> int: ...  # prompt + k x max_new_tokens


Request = TypeVar("Request", bound=Schedulable)


class Scheduler(Generic[Request]):
    def __init__(self, max_rows: int, pages: PageAllocator, max_prefill_tokens: int) -> None:
        self.max_rows = max_rows
        self.pages = pages
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.rows_in_use = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def admit(self) -> list[Request]:
        """Move waiting requests to running while their rows and KV slots fit."""
        admitted: list[Request] = []
        prefill_tokens = 0
        while self.waiting:
            head = self.waiting[0]
            if self.rows_in_use + head.num_rows > self.max_rows:
                break
            if not self.pages.can_reserve(head.kv_slots):
                break
            if admitted and prefill_tokens + head.prompt_len > self.max_prefill_tokens:
                break
            self.waiting.popleft()
            head.pages = self.pages.reserve(head.kv_slots)
            self.rows_in_use += head.num_rows
            prefill_tokens += head.prompt_len
            self.running.append(head)
            admitted.append(head)
        return admitted

    def finish(self, request: Request) -> None:
        if request in self.running:
            self.running.remove(request)
            self.pages.release(request.pages)
            self.rows_in_use -= request.num_rows
            request.pages = []
        request.finished = True

    def abort(self, request_id: str) -> Request | None:
        for request in list(self.waiting):
            if request.request_id == request_id:
                self.waiting.remove(request)
                request.finished = True
                return request
        for request in self.running:
            if request.request_id == request_id:
                self.finish(request)
                return request
        return None

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)
