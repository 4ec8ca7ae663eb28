"""Admission policy: FIFO, a request enters only when all it can ever need is free.

Budget per request: k rows and prompt + k x max_new_tokens KV slots, both reserved at admission
and held until the request finishes, so a running request is never retracted or aborted for
memory. Strict FIFO keeps wide requests from starving behind a stream of narrow ones.

Batched admission (`admission_ratio` > 0): while requests of one width run, waiting ones of
that width are held back until their rows reach that share of the running rows, or the oldest
has been held `admission_max_wait_steps` steps, or nothing runs. Requests that arrive a few
milliseconds apart (the next requests of clients whose answers left together) are then
prefilled in one forward and decode in step with each other, instead of each small group adding
a prefill forward and a decode cohort of its own; an idle engine admits at once. Traffic of
mixed widths is never held: a narrow request held behind wide ones waits their longer steps and
joins no cohort of theirs (their expansion specs differ), so the hold would cost latency and
shed load for nothing.

With the prompt-prefix cache (`kv/prefix_cache.py`) a request's cached prefix pages are shared,
not reserved again, and unheld cached pages are evicted to make room; a running request's pages
never are.

Plain Python: a request is anything with the few numbers the policy weighs (`Schedulable`); the
engine's `Request` is one.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

from widebeam.services.decoder.kv.kv_reservation import KVReservation
from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.kv.prefix_cache import PrefixCache


class Schedulable(Protocol):
    """What admission reads of a request, and the two fields it writes."""

    pages: list[int]  # the KV pages it addresses (empty until admitted, and once finished)
    reservation: KVReservation | None  # what it holds of the cache (None unless running)
    finished: bool

    @property
    def request_id(self) -> str: ...

    @property
    def num_rows(self) -> int: ...  # k

    @property
    def prompt_len(self) -> int: ...

    @property
    def prompt_ids(self) -> tuple[int, ...]: ...

    @property
    def kv_slots(self) -> int: ...  # prompt + k x max_new_tokens


Request = TypeVar("Request", bound=Schedulable)


class Scheduler(Generic[Request]):
    def __init__(
        self,
        max_rows: int,
        pages: PageAllocator,
        max_prefill_tokens: int,
        prefix_cache: bool = False,
        admission_ratio: float = 0.0,
        admission_max_wait_steps: int = 0,
    ) -> None:
        self.max_rows = max_rows
        self.pages = pages
        self.kv = PrefixCache(pages, enabled=prefix_cache)
        self.max_prefill_tokens = max_prefill_tokens
        self.admission_ratio = admission_ratio
        self.admission_max_wait_steps = admission_max_wait_steps
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.rows_in_use = 0
        self.held_steps = 0  # consecutive admit() calls that held the waiting requests back

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def admit(self) -> list[Request]:
        """Move waiting requests to running while their rows and KV slots fit (once per engine
        step; batched admission may hold them back for this step)."""
        if self._holds_back():
            self.held_steps += 1
            return []
        self.held_steps = 0
        admitted: list[Request] = []
        prefill_tokens = 0
        while self.waiting:
            head = self.waiting[0]
            if self.rows_in_use + head.num_rows > self.max_rows:
                break
            # The step's prefill budget counts the tokens prefill computes: not cached ones.
            prefill = head.prompt_len - self.kv.cached_tokens(head.prompt_ids)
            if admitted and prefill_tokens + prefill > self.max_prefill_tokens:
                break
            reservation = self.kv.reserve(head.prompt_ids, head.kv_slots)
            if reservation is None:
                break
            self.waiting.popleft()
            head.reservation = reservation
            head.pages = list(reservation.pages)
            self.rows_in_use += head.num_rows
            prefill_tokens += head.prompt_len - reservation.cached_tokens
            self.running.append(head)
            admitted.append(head)
        return admitted

    def admit_whole_queue(self) -> list[Request]:
        """Admit every waiting request, or none (changing nothing): for an engine step that
        admits before the requests finishing in it have released their rows and pages. All are
        taken only when all fit from free rows and free pages alone (no eviction, every prompt
        counted as uncached), so the set is the one `admit` would take once those requests are
        released: more room only lets FIFO take the same whole queue."""
        queue = self.waiting
        if not queue or self._holds_back():
            return []
        if self.rows_in_use + sum(r.num_rows for r in queue) > self.max_rows:
            return []
        if len(queue) > 1 and sum(r.prompt_len for r in queue) > self.max_prefill_tokens:
            return []
        pages = self.pages
        if sum(pages.pages_for(r.kv_slots) for r in queue) > pages.free_pages:
            return []
        return self.admit()

    def _holds_back(self) -> bool:
        if self.admission_ratio <= 0 or not self.waiting or not self.running:
            return False
        if self.held_steps >= self.admission_max_wait_steps:
            return False
        width = self.waiting[0].num_rows
        if any(r.num_rows != width for r in self.waiting) or any(
            r.num_rows != width for r in self.running
        ):
            return False
        waiting_rows = width * len(self.waiting)
        return waiting_rows < self.admission_ratio * self.rows_in_use

    def finish(self, request: Request) -> None:
        if request in self.running:
            self.running.remove(request)
            assert request.reservation is not None
            self.kv.release(request.reservation)
            self.rows_in_use -= request.num_rows
            request.pages = []
            request.reservation = None
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
