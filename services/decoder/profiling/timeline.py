"""What the device did over a window, and what the engine's host thread did while it idled.

A profile's device spans (kernels, copies, memsets) merge into busy intervals; the time between
them is the device's idle time. Each idle gap is split over the engine phases the engine thread
went through while it lasted (at each instant the innermost `engine.*` annotation,
`Engine.annotate`), so a profile says, e.g., "the device waited 6 ms a second while the host
built answers". Time in no phase is "between steps" (the server's loop: handing answers over,
taking new requests). Plain Python over plain spans: the torch profiler's events are converted
in `capture.py`.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

ANNOTATION_PREFIX = "engine."
STEP_ANNOTATION = ANNOTATION_PREFIX + "step"
BETWEEN_STEPS = "between steps"
MIN_GAP_NS = 20_000  # shorter idle time is launch spacing, not a wait worth naming
TOP_KERNELS = 12
# Device spans by length: the short ones are where a forward's cost is its kernel count rather
# than its work (a batch of few rows still runs every layer's norm, rope, SiLU and attention).
SPAN_LENGTH_CLASSES_NS = ((10_000, "< 10 us"), (100_000, "10-100 us"), (None, ">= 100 us"))


class Span(NamedTuple):
    start_ns: int
    end_ns: int
    name: str
    thread: int = 0  # host spans: the thread that ran it; device spans: 0


@dataclass
class TimelineSummary:
    window_ms: float  # first device span's start to the last one's end (0: no device spans)
    device_busy_ms: float  # union of the device spans
    device_busy_share: float
    idle_gaps: int  # gaps of at least MIN_GAP_NS
    idle_ms_by_phase: dict[str, float] = field(default_factory=dict)  # those gaps, by phase
    steps: int = 0  # engine steps that began in the window
    host_ms_by_phase: dict[str, float] = field(default_factory=dict)  # engine thread, exclusive
    top_kernels_ms: dict[str, float] = field(default_factory=dict)
    device_spans: int = 0  # kernels, copies and memsets in the window
    # SPAN_LENGTH_CLASSES_NS' labels -> [spans, their device ms] (overlaps counted in each)
    spans_by_length: dict[str, list[float]] = field(default_factory=dict)
    largest_gaps_ms: list[tuple[float, str]] = field(default_factory=list)  # (ms, main phase)
    # CUDA runtime calls (copies, synchronizations, launches) by "<call> in <engine phase>":
    # where the host itself waited on the device, and for what
    runtime_ms: dict[str, float] = field(default_factory=dict)
    # The collector's passes in the window, every thread's (a pass holds the GIL throughout)
    gc_passes: int = 0
    gc_ms: float = 0.0
    gc_max_ms: float = 0.0

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def busy_intervals(device: Iterable[Span]) -> list[tuple[int, int]]:
    """The device spans merged into disjoint busy intervals, in time order."""
    merged: list[tuple[int, int]] = []
    for start, end, *_ in sorted(device):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def spans_by_length(device: Iterable[Span]) -> dict[str, list[float]]:
    """SPAN_LENGTH_CLASSES_NS' labels -> [how many spans, their summed ms], every class
    listed."""
    classes = {label: [0, 0.0] for _, label in SPAN_LENGTH_CLASSES_NS}
    for span in device:
        length = span.end_ns - span.start_ns
        label = next(lb for limit, lb in SPAN_LENGTH_CLASSES_NS if limit is None or length < limit)
        classes[label][0] += 1
        classes[label][1] += length / 1e6
    return {label: [n, round(ms, 3)] for label, (n, ms) in classes.items()}


def engine_thread(host: Sequence[Span]) -> int | None:
    """The thread that ran the most engine steps (None: no step in the profile)."""
    steps = Counter(span.thread for span in host if span.name == STEP_ANNOTATION)
    return steps.most_common(1)[0][0] if steps else None


class _Phases:
    """The engine thread's annotations, nested (a step holds its phases)."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))  # parents first

    def segments(self) -> list[tuple[int, int, str]]:
        """The engine thread's time as disjoint (start, end, innermost phase) segments, in time
        order; time outside every span is absent."""
        out: list[tuple[int, int, str]] = []

        def emit(start: int, end: int, name: str) -> None:
            if end > start:
                out.append((start, end, name.removeprefix(ANNOTATION_PREFIX)))

        stack: list[Span] = []
        t = 0
        for span in self.spans:
            while stack and stack[-1].end_ns <= span.start_ns:
                top = stack.pop()
                emit(t, top.end_ns, top.name)
                t = top.end_ns
            if stack:
                emit(t, span.start_ns, stack[-1].name)
            stack.append(span)
            t = span.start_ns
        while stack:
            top = stack.pop()
            emit(t, top.end_ns, top.name)
            t = max(t, top.end_ns)
        return out

    def exclusive_ms(self) -> dict[str, float]:
        """Each phase's own time on the engine thread (nested phases' time not counted)."""
        own: dict[str, float] = defaultdict(float)
        stack: list[Span] = []
        for span in self.spans:
            while stack and stack[-1].end_ns <= span.start_ns:
                stack.pop()
            duration = span.end_ns - span.start_ns
            own[span.name] += duration
            if stack:
                own[stack[-1].name] -= duration
            stack.append(span)
        return {
            name.removeprefix(ANNOTATION_PREFIX): round(ns / 1e6, 3)
            for name, ns in sorted(own.items(), key=lambda kv: -kv[1])
        }


def _split(
    start: int, end: int, segments: list[tuple[int, int, str]], seg_starts: list[int]
) -> dict[str, int]:
    """[start, end) split over the phases of the segments it overlaps; the rest between steps."""
    split: dict[str, int] = defaultdict(int)
    covered = 0
    i = max(bisect.bisect_right(seg_starts, start) - 1, 0)
    while i < len(segments) and segments[i][0] < end:
        seg_start, seg_end, phase = segments[i]
        overlap = min(end, seg_end) - max(start, seg_start)
        if overlap > 0:
            split[phase] += overlap
            covered += overlap
        i += 1
    if end - start > covered:
        split[BETWEEN_STEPS] += end - start - covered
    return split


def summarize(
    device: Sequence[Span],
    host: Sequence[Span],
    gc_ms: Sequence[float] = (),
    runtime: Sequence[Span] = (),
) -> TimelineSummary:
    """device: kernels, copies and memsets; host: the `engine.*` annotations of every thread
    (the engine thread's are used: the thread that ran the most steps); gc_ms: the collector's
    passes; runtime: CUDA runtime calls (charged to the engine phase they began in). Without
    device spans (a CPU engine) only the host's side is filled in."""
    thread = engine_thread(host)
    phases = _Phases([s for s in host if s.thread == thread])
    busy = busy_intervals(device)
    window_start = busy[0][0] if busy else min((s.start_ns for s in phases.spans), default=0)
    steps = sum(1 for s in phases.spans if s.name == STEP_ANNOTATION and s.start_ns >= window_start)
    summary = TimelineSummary(0.0, 0.0, 0.0, 0, steps=steps, host_ms_by_phase=phases.exclusive_ms())
    summary.gc_passes = len(gc_ms)
    summary.gc_ms = round(sum(gc_ms), 3)
    summary.gc_max_ms = round(max(gc_ms, default=0.0), 3)
    segments = phases.segments()
    seg_starts = [seg[0] for seg in segments]
    calls: dict[str, float] = defaultdict(float)
    for call in runtime:
        phase = next(iter(_split(call.start_ns, call.start_ns + 1, segments, seg_starts)))
        calls[f"{call.name} in {phase}"] += (call.end_ns - call.start_ns) / 1e6
    top_calls = sorted(calls.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    summary.runtime_ms = {k: round(v, 3) for k, v in top_calls}
    if not busy:
        return summary
    window = busy[-1][1] - busy[0][0]
    busy_ns = sum(end - start for start, end in busy)
    idle: dict[str, float] = defaultdict(float)
    gaps: list[tuple[float, str]] = []
    for (_, gap_start), (gap_end, _) in itertools.pairwise(busy):
        if gap_end - gap_start < MIN_GAP_NS:
            continue
        split = _split(gap_start, gap_end, segments, seg_starts)
        for phase, ns in split.items():
            idle[phase] += ns / 1e6
        main = max(split, key=lambda phase: split[phase])
        gaps.append((round((gap_end - gap_start) / 1e6, 3), main))
    kernels: dict[str, float] = defaultdict(float)
    for span in device:
        kernels[span.name[:80]] += (span.end_ns - span.start_ns) / 1e6
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    summary.window_ms = round(window / 1e6, 3)
    summary.device_busy_ms = round(busy_ns / 1e6, 3)
    summary.device_busy_share = round(busy_ns / window, 4) if window else 1.0
    summary.idle_gaps = len(gaps)
    summary.idle_ms_by_phase = {
        k: round(v, 3) for k, v in sorted(idle.items(), key=lambda kv: -kv[1])
    }
    summary.top_kernels_ms = {k: round(v, 3) for k, v in top}
    summary.device_spans = len(device)
    summary.spans_by_length = spans_by_length(device)
    summary.largest_gaps_ms = sorted(gaps, reverse=True)[:10]
    return summary
