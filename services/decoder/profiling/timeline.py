"""What the device did over a window, and what the engine's host thread did while it idled.

A profile's device spans (kernels, copies, memsets) merge into busy intervals; the time between
them is the device's idle time. Each idle gap is charged to the engine phase the engine thread
was in when the gap began (the innermost `engine.*` annotation, `Engine.annotate`), so a
profile says, e.g., "the device waited 6 ms a second while the host finished requests". A gap
while the engine thread was in no phase is "between steps" (the server's loop: handing answers
over, taking new requests). Plain Python over plain spans: the torch profiler's events are
converted in `capture.py`.
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
    largest_gaps_ms: list[tuple[float, str]] = field(default_factory=list)

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


def engine_thread(host: Sequence[Span]) -> int | None:
    """The thread that ran the most engine steps (None: no step in the profile)."""
    steps = Counter(span.thread for span in host if span.name == STEP_ANNOTATION)
    return steps.most_common(1)[0][0] if steps else None


class _Phases:
    """The engine thread's annotations, answering "which phase was innermost at time t"."""

    def __init__(self, spans: Sequence[Span]) -> None:
        self.spans = sorted(spans)
        self.starts = [s.start_ns for s in self.spans]
        self.reach = list(itertools.accumulate((s.end_ns for s in self.spans), max))

    def at(self, t: int) -> str:
        # Nested spans start later and end sooner: the latest-starting span containing t is the
        # innermost one; no span at or before i reaches t once reach[i] <= t.
        for i in range(bisect.bisect_right(self.starts, t) - 1, -1, -1):
            if self.reach[i] <= t:
                break
            if self.spans[i].end_ns > t:
                return self.spans[i].name.removeprefix(ANNOTATION_PREFIX)
        return BETWEEN_STEPS

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


def summarize(device: Sequence[Span], host: Sequence[Span]) -> TimelineSummary:
    """device: kernels, copies and memsets; host: the `engine.*` annotations of every thread
    (the engine thread's are used: the thread that ran the most steps). Without device spans
    (a CPU engine) only the host's side is filled in."""
    thread = engine_thread(host)
    phases = _Phases([s for s in host if s.thread == thread])
    busy = busy_intervals(device)
    window_start = busy[0][0] if busy else min((s.start_ns for s in phases.spans), default=0)
    steps = sum(1 for s in phases.spans if s.name == STEP_ANNOTATION and s.start_ns >= window_start)
    summary = TimelineSummary(0.0, 0.0, 0.0, 0, steps=steps, host_ms_by_phase=phases.exclusive_ms())
    if not busy:
        return summary
    window = busy[-1][1] - busy[0][0]
    busy_ns = sum(end - start for start, end in busy)
    idle: dict[str, float] = defaultdict(float)
    gaps: list[tuple[float, str]] = []
    for (_, prev_end), (next_start, _) in itertools.pairwise(busy):
        gap = next_start - prev_end
        if gap < MIN_GAP_NS:
            continue
        phase = phases.at(prev_end)
        idle[phase] += gap / 1e6
        gaps.append((round(gap / 1e6, 3), phase))
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
    summary.largest_gaps_ms = sorted(gaps, reverse=True)[:10]
    return summary
