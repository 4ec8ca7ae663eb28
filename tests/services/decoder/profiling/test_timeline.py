"""The timeline summary on hand-made spans: busy time is the union of device spans, each idle
gap is charged to the engine thread's innermost phase when it began, host time per phase is
exclusive of nested phases, and only the thread that ran the steps counts."""

from __future__ import annotations

from widebeam.services.decoder.profiling.timeline import (
    BETWEEN_STEPS,
    MIN_GAP_NS,
    Span,
    busy_intervals,
    engine_thread,
    spans_by_length,
    summarize,
)

US = 1_000  # ns
MS = 1_000_000


def test_busy_intervals_merge_overlaps_and_touching_spans() -> None:
    spans = [Span(50, 60, "c"), Span(0, 10, "a"), Span(5, 20, "b"), Span(20, 30, "d")]
    assert busy_intervals(spans) == [(0, 30), (50, 60)]
    assert busy_intervals([Span(0, 100, "long"), Span(10, 20, "inside")]) == [(0, 100)]
    assert busy_intervals([]) == []


def test_engine_thread_is_the_one_with_most_steps() -> None:
    host = [
        Span(0, 1, "engine.step", 7),
        Span(2, 3, "engine.step", 9),
        Span(4, 5, "engine.step", 9),
    ]
    assert engine_thread(host) == 9
    assert engine_thread([Span(0, 1, "engine.finish", 3)]) is None


def test_idle_gaps_split_over_the_innermost_phases() -> None:
    t = 7
    host = [
        Span(0, 10 * MS, "engine.step", t),
        Span(1 * MS, 3 * MS, "engine.finish", t),
        Span(4 * MS, 9 * MS, "engine.prefill", t),
        Span(5 * MS, 6 * MS, "engine.select", t),  # nested in prefill
        Span(12 * MS, 13 * MS, "engine.step", t),
        Span(12 * MS, 12 * MS + 500 * US, "engine.gc", t),  # starts with its step
        # another thread's marks never count
        Span(0, 20 * MS, "engine.finish", t + 1),
    ]
    device = [
        Span(0, 500 * US, "gemm"),  # idle from 0.5 ms: 0.5 ms in the step, 2 ms in finish
        Span(3 * MS, 5 * MS + 500 * US, "gemm"),  # idle 0.5 ms in select
        Span(6 * MS, 10 * MS, "attention"),  # idle 1 ms after the step: between steps
        Span(11 * MS, 11 * MS + MIN_GAP_NS // 2, "tiny"),
        Span(11 * MS + MIN_GAP_NS, 12 * MS, "gemm"),  # a gap too short to charge
        Span(12 * MS + 250 * US, 12 * MS + 300 * US, "gemm"),  # idle 0.25 ms in gc
    ]
    runtime = [
        Span(1 * MS + 100 * US, 2 * MS, "cudaStreamSynchronize", 99),  # in finish
        Span(2 * MS, 2 * MS + 300 * US, "cudaStreamSynchronize", 99),  # in finish
        Span(5 * MS, 5 * MS + 10 * US, "cudaGraphLaunch", 99),  # select
        Span(10 * MS + 100 * US, 10 * MS + 200 * US, "cudaMemcpyAsync", 99),  # between steps
    ]
    summary = summarize(device, host, gc_ms=[0.5, 1.5], runtime=runtime)
    assert summary.window_ms == 12.3
    busy = 0.5 + 2.5 + 4 + (1 - MIN_GAP_NS / MS) + (MIN_GAP_NS / 2) / MS + 0.05
    assert abs(summary.device_busy_ms - busy) < 1e-3
    assert abs(summary.device_busy_share - busy / 12.3) < 1e-4
    assert summary.idle_gaps == 4
    assert summary.idle_ms_by_phase == {
        "finish": 2.0, BETWEEN_STEPS: 1.0, "step": 0.5, "select": 0.5, "gc": 0.25
    }  # fmt: skip
    assert summary.largest_gaps_ms == [
        (2.5, "finish"), (1.0, BETWEEN_STEPS), (0.5, "select"), (0.25, "gc")
    ]  # fmt: skip
    assert summary.steps == 2
    # exclusive host time: each step less its phases; prefill less its select
    assert summary.host_ms_by_phase == {
        "step": 3.5, "prefill": 4.0, "finish": 2.0, "select": 1.0, "gc": 0.5
    }  # fmt: skip
    assert summary.top_kernels_ms["gemm"] == round(0.5 + 2.5 + 1 - MIN_GAP_NS / MS + 0.05, 3)
    assert summary.device_spans == 6
    assert summary.spans_by_length == {
        "< 10 us": [0, 0.0],
        "10-100 us": [2, round(MIN_GAP_NS / 2 / MS + 0.05, 3)],  # "tiny" is 10 us long
        ">= 100 us": [4, round(0.5 + 2.5 + 4 + 1 - MIN_GAP_NS / MS, 3)],
    }
    assert (summary.gc_passes, summary.gc_ms, summary.gc_max_ms) == (2, 2.0, 1.5)
    assert summary.runtime_ms == {
        "cudaStreamSynchronize in finish": 1.2,
        f"cudaMemcpyAsync in {BETWEEN_STEPS}": 0.1,
        "cudaGraphLaunch in select": 0.01,
    }
    assert set(summary.to_json()) >= {"device_busy_share", "idle_ms_by_phase", "gc_ms"}


def test_without_device_spans_only_the_host_side() -> None:
    host = [Span(0, 5 * MS, "engine.step", 1), Span(1 * MS, 2 * MS, "engine.decode", 1)]
    summary = summarize([], host)
    assert summary.window_ms == summary.device_busy_ms == 0 and summary.idle_gaps == 0
    assert summary.steps == 1
    assert summary.host_ms_by_phase == {"step": 4.0, "decode": 1.0}
    empty = summarize([], [])
    assert empty.steps == 0 and empty.host_ms_by_phase == {}
    assert empty.device_spans == 0 and empty.spans_by_length == {}


def test_spans_by_length_puts_each_boundary_in_the_longer_class() -> None:
    spans = [Span(0, 10 * US - 1, "a"), Span(0, 10 * US, "b"), Span(0, 100 * US, "c")]
    assert spans_by_length(spans) == {
        "< 10 us": [1, 0.01], "10-100 us": [1, 0.01], ">= 100 us": [1, 0.1]
    }  # fmt: skip
    assert spans_by_length([]) == {
        "< 10 us": [0, 0.0],
        "10-100 us": [0, 0.0],
        ">= 100 us": [0, 0.0],
    }
