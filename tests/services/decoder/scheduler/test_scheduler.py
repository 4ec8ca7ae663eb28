"""Admission reserves rows and KV for a request's whole life; strict FIFO; release on finish."""

from __future__ import annotations

from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.requests.validation import ResolvedRequest
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.scheduler.scheduler import Scheduler


def _state(rid: str, k: int, prompt: int, max_new: int, arrival: int) -> RequestState:
    spec = GenerationRequest(rid, tuple(range(prompt)), beam_width=k, n=1, max_new_tokens=max_new)
    return RequestState(ResolvedRequest(spec, (), prompt + k * max_new), None, arrival)


def test_admits_only_what_fits_rows_and_kv() -> None:
    sched = Scheduler(max_rows=10, pages=PageAllocator(8, 16), max_prefill_tokens=10_000)
    a = _state("a", 6, 10, 4, 0)  # 34 slots -> 3 pages
    b = _state("b", 6, 10, 4, 1)  # needs 6 rows: only 4 left
    c = _state("c", 2, 10, 4, 2)  # would fit, but FIFO keeps it behind b
    for s in (a, b, c):
        sched.add(s)
    assert sched.admit() == [a]
    assert sched.rows_in_use == 6 and sched.pages.free_pages == 5
    assert sched.admit() == []
    sched.finish(a)
    assert sched.rows_in_use == 0 and sched.pages.free_pages == 8
    assert sched.admit() == [b, c]


def test_kv_budget_blocks_admission_until_release() -> None:
    sched = Scheduler(max_rows=100, pages=PageAllocator(4, 16), max_prefill_tokens=10_000)
    big = _state("big", 4, 16, 8, 0)  # 48 slots -> 3 pages
    other = _state("other", 4, 16, 8, 1)
    sched.add(big)
    sched.add(other)
    assert sched.admit() == [big]
    assert sched.admit() == []  # running requests keep their reservation: never retracted
    assert big in sched.running
    sched.finish(big)
    assert sched.admit() == [other]


def test_prefill_token_budget_spreads_admissions_over_steps() -> None:
    sched = Scheduler(max_rows=100, pages=PageAllocator(100, 16), max_prefill_tokens=30)
    states = [_state(f"r{i}", 1, 20, 2, i) for i in range(3)]
    for s in states:
        sched.add(s)
    assert sched.admit() == states[:1]
    assert sched.admit() == states[1:2]


def test_abort_waiting_and_running() -> None:
    sched = Scheduler(max_rows=4, pages=PageAllocator(8, 16), max_prefill_tokens=10_000)
    a, b = _state("a", 4, 4, 2, 0), _state("b", 4, 4, 2, 1)
    sched.add(a)
    sched.add(b)
    sched.admit()
    assert sched.abort("b") is b and not sched.waiting
    assert sched.abort("a") is a and sched.rows_in_use == 0 and sched.pages.free_pages == 8
    assert sched.abort("zzz") is None


def test_prefix_cache_shares_pages_and_counts_only_prefilled_tokens() -> None:
    sched = Scheduler(
        max_rows=100, pages=PageAllocator(10, 16), max_prefill_tokens=40, prefix_cache=True
    )
    first = _state("first", 1, 40, 2, 0)  # prompt 0..39: 2 full pages cached at admission
    sched.add(first)
    assert sched.admit() == [first] and first.cached_prompt_tokens == 0
    # 40 tokens each, 32 of them cached: 8 + 8 + 8 fit the 40-token budget, 40 alone would not
    others = [_state(f"r{i}", 1, 40, 2, i) for i in range(1, 4)]
    for s in others:
        sched.add(s)
    assert sched.admit() == others
    assert all(s.cached_prompt_tokens == 32 and s.pages[:2] == first.pages[:2] for s in others)
    assert sched.pages.free_pages == 10 - 3 - 3  # each of the others: 1 page of its own
    for s in (first, *others):
        sched.finish(s)
    assert sched.pages.free_pages == 8 and sched.kv.free_slots == 160  # 2 cached, evictable


def _batched(ratio: float, max_wait_steps: int) -> Scheduler[RequestState]:
    return Scheduler(
        max_rows=100, pages=PageAllocator(100, 16), max_prefill_tokens=10_000,
        admission_ratio=ratio, admission_max_wait_steps=max_wait_steps,
    )  # fmt: skip


def test_batched_admission_holds_a_small_group_back_while_others_run() -> None:
    sched = _batched(ratio=1.0, max_wait_steps=5)
    running = [_state(f"run{i}", 4, 8, 3, i) for i in range(4)]  # 16 rows
    for s in running:
        sched.add(s)
    assert sched.admit() == running  # nothing ran: admitted at once
    late = [_state(f"late{i}", 4, 8, 3, 10 + i) for i in range(2)]  # 8 rows < 1.0 x 16
    for s in late:
        sched.add(s)
    assert sched.admit() == [] and sched.held_steps == 1
    later = [_state(f"later{i}", 4, 8, 3, 20 + i) for i in range(2)]  # 16 rows waiting now
    for s in later:
        sched.add(s)
    assert sched.admit() == late + later  # the waiting rows reached the running ones
    assert sched.held_steps == 0


def test_batched_admission_waits_at_most_its_steps_and_never_on_an_idle_engine() -> None:
    sched = _batched(ratio=2.0, max_wait_steps=2)
    first = [_state(f"first{i}", 4, 8, 3, i) for i in range(2)]
    for s in first:
        sched.add(s)
    assert sched.admit() == first
    small = _state("small", 4, 8, 3, 5)
    sched.add(small)
    assert sched.admit() == [] and sched.admit() == []  # held for two steps
    assert sched.admit() == [small]  # the third admits it whatever the ratio says
    other = _state("other", 4, 8, 3, 6)
    sched.add(other)
    for s in (*first, small):
        sched.finish(s)
    assert sched.admit() == [other]  # nothing runs: no reason to wait


def test_batched_admission_never_holds_traffic_of_mixed_widths() -> None:
    sched = _batched(ratio=1.0, max_wait_steps=5)
    wide = _state("wide", 16, 8, 3, 0)
    sched.add(wide)
    assert sched.admit() == [wide]
    narrow = _state("narrow", 2, 8, 3, 1)  # 2 rows < 1.0 x 16, but another width
    sched.add(narrow)
    assert sched.admit() == [narrow] and sched.held_steps == 0
    # one width waiting, two running: no cohort to wait for either
    late = _state("late", 2, 8, 3, 2)
    sched.add(late)
    assert sched.admit() == [late]
    # waiting requests of two widths behind running ones of one of them: admitted too
    sched.finish(wide)
    mixed = [_state("m0", 2, 8, 3, 3), _state("m1", 4, 8, 3, 4)]
    for s in mixed:
        sched.add(s)
    assert sched.admit() == mixed
    # the same width on both sides: held as before
    sched.finish(mixed[1])
    held = _state("held", 2, 8, 3, 5)
    sched.add(held)
    assert sched.admit() == [] and sched.held_steps == 1


def test_ratio_zero_admits_at_every_step() -> None:
    sched = _batched(ratio=0.0, max_wait_steps=5)
    a, b = _state("a", 8, 8, 3, 0), _state("b", 1, 8, 3, 1)
    sched.add(a)
    assert sched.admit() == [a]
    sched.add(b)
    assert sched.admit() == [b]


def _snapshot(sched: Scheduler[RequestState]) -> tuple[object, ...]:
    return (
        [s.request_id for s in sched.waiting], [s.request_id for s in sched.running],
        sched.rows_in_use, sched.pages.free_pages, sched.kv.tree.num_nodes, sched.held_steps,
    )  # fmt: skip


def test_whole_queue_admitted_when_it_all_fits_from_free_room() -> None:
    sched = Scheduler(max_rows=16, pages=PageAllocator(12, 16), max_prefill_tokens=64)
    running = _state("running", 4, 10, 4, 0)  # 26 slots -> 2 pages
    sched.add(running)
    assert sched.admit() == [running]
    queue = [_state(f"q{i}", 4, 20, 4, 1 + i) for i in range(3)]  # 12 rows, 60 tokens, 9 pages
    for s in queue:
        sched.add(s)
    assert sched.admit_whole_queue() == queue
    assert not sched.waiting and sched.rows_in_use == 16 and sched.pages.free_pages == 1
    assert sched.admit_whole_queue() == []  # nothing waits


def test_whole_queue_or_nothing_and_nothing_changes() -> None:
    """Each limit alone refuses the whole queue, changing nothing, where `admit` would take
    part of it (or all of it only by evicting cached pages)."""

    def refused(sched: Scheduler[RequestState], queue: list[RequestState]) -> None:
        for s in queue:
            sched.add(s)
        before = _snapshot(sched)
        assert sched.admit_whole_queue() == []
        assert _snapshot(sched) == before
        assert sched.admit() != []  # admission proper still takes what fits

    rows = Scheduler(max_rows=10, pages=PageAllocator(12, 16), max_prefill_tokens=10_000)
    refused(rows, [_state("a", 6, 10, 4, 0), _state("b", 6, 10, 4, 1)])  # 12 rows > 10
    tokens = Scheduler(max_rows=100, pages=PageAllocator(12, 16), max_prefill_tokens=30)
    refused(tokens, [_state("a", 1, 20, 2, 0), _state("b", 1, 20, 2, 1)])  # 40 tokens > 30
    pages = Scheduler(max_rows=100, pages=PageAllocator(4, 16), max_prefill_tokens=10_000)
    refused(pages, [_state("a", 4, 16, 8, 0), _state("b", 4, 16, 8, 1)])  # 3 + 3 pages > 4
    # A cached page that is no longer held is room for `admit` (by eviction), not for this.
    cached = Scheduler(max_rows=100, pages=PageAllocator(4, 16), max_prefill_tokens=10_000,
                       prefix_cache=True)  # fmt: skip
    done = _state("done", 1, 40, 1, 0)  # 41 slots -> 3 pages, 2 of them cached prompt pages
    cached.add(done)
    assert cached.admit() == [done]
    cached.finish(done)
    assert cached.pages.free_pages == 2 and cached.kv.free_slots == 4 * 16
    refused(cached, [_state("new", 2, 20, 8, 1)])  # 36 slots -> 3 pages: only by eviction


def test_whole_queue_never_admitted_while_batched_admission_holds_it() -> None:
    sched = _batched(ratio=1.0, max_wait_steps=5)
    running = [_state(f"run{i}", 4, 8, 3, i) for i in range(4)]
    for s in running:
        sched.add(s)
    assert sched.admit_whole_queue() == running  # nothing ran: nothing to wait for
    late = _state("late", 4, 8, 3, 10)
    sched.add(late)
    assert sched.admit_whole_queue() == [] and sched.held_steps == 0  # the hold is admit's
    assert sched.admit() == [] and sched.held_steps == 1
