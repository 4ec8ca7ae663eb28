"""Admission policy: FIFO, a request enters only when all it can ever need is free.

Budget per request: k rows and prompt + k x max_new_tokens KV slots, both reserved at admission
and held until the request finishes, so a running request is never retracted or aborted for
memory. Strict FIFO keeps wide requests from starving behind a stream of narrow ones.
"""

from __future__ import annotations

from collections import deque

from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.scheduler.request_state import RequestState


class Scheduler:
    def __init__(self, max_rows: int, pages: PageAllocator, max_prefill_tokens: int) -> None:
        self.max_rows = max_rows
        self.pages = pages
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[RequestState] = deque()
        self.running: list[RequestState] = []
        self.rows_in_use = 0

    def add(self, state: RequestState) -> None:
        self.waiting.append(state)

    def admit(self) -> list[RequestState]:
        """Move waiting requests to running while their rows and KV slots fit."""
        admitted: list[RequestState] = []
        prefill_tokens = 0
        while self.waiting:
            head = self.waiting[0]
            if self.rows_in_use + head.num_rows > self.max_rows:
                break
            if not self.pages.can_reserve(head.resolved.kv_slots):
                break
            if admitted and prefill_tokens + head.prompt_len > self.max_prefill_tokens:
                break
            self.waiting.popleft()
            head.pages = self.pages.reserve(head.resolved.kv_slots)
            self.rows_in_use += head.num_rows
            prefill_tokens += head.prompt_len
            self.running.append(head)
            admitted.append(head)
        return admitted

    def finish(self, state: RequestState) -> None:
        if state in self.running:
            self.running.remove(state)
            self.pages.release(state.pages)
            self.rows_in_use -= state.num_rows
            state.pages = []
        state.finished = True

    def abort(self, request_id: str) -> RequestState | None:
        for state in list(self.waiting):
            if state.request_id == request_id:
                self.waiting.remove(state)
                state.finished = True
                return state
        for state in self.running:
            if state.request_id == request_id:
                self.finish(state)
                return state
        return None

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)
