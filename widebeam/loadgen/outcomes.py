"""What each request got, and the figures of a phase: answers by status, shed requests and their
`Retry-After`, wrong answers, latency percentiles of the admitted (200) and of the shed ones,
throughput."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from widebeam.loadgen.checks import SHED_STATUSES


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    sent: float  # seconds since the phase began
    latency: float  # seconds
    status: int  # 0: no HTTP answer (see `problem`)
    problem: str | None = None  # None: the answer is right for the request


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending sequence; 0.0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float

    @staticmethod
    def of(values: Sequence[float]) -> Latency:
        ordered = sorted(values)
        return Latency(*(round(percentile(ordered, q) * 1000, 1) for q in (50, 90, 99, 100)))


@dataclass(frozen=True)
class PhaseSummary:
    name: str
    duration_s: float
    sent: int
    offered_rate: float  # requests sent per second
    target_rate: float | None  # open loop: the rate asked for
    by_status: dict[str, int]
    by_kind: dict[str, int]
    admitted: int  # 200
    throughput: float  # 200s per second
    shed: int  # 429 + 503
    shed_with_retry_after: int
    server_errors: int  # 5xx other than a 503 (shedding); must be 0
    wrong: int  # answers with a problem (wrong body, missing Retry-After, other status, ...)
    problems: dict[str, int] = field(default_factory=dict)  # up to 10 distinct, with counts
    admitted_latency: Latency = field(default_factory=lambda: Latency.of([]))
    shed_latency: Latency = field(default_factory=lambda: Latency.of([]))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    name: str, outcomes: Sequence[Outcome], duration_s: float, target_rate: float | None = None
) -> PhaseSummary:
    by_status = Counter(str(o.status) if o.status else "no_answer" for o in outcomes)
    shed = [o for o in outcomes if o.status in SHED_STATUSES]
    admitted = [o for o in outcomes if o.status == 200]
    problems = Counter(o.problem for o in outcomes if o.problem is not None)
    duration_s = max(duration_s, 1e-9)
    return PhaseSummary(
        name=name,
        duration_s=round(duration_s, 2),
        sent=len(outcomes),
        offered_rate=round(len(outcomes) / duration_s, 1),
        target_rate=None if target_rate is None else round(target_rate, 1),
        by_status=dict(sorted(by_status.items())),
        by_kind=dict(sorted(Counter(o.kind for o in outcomes).items())),
        admitted=len(admitted),
        throughput=round(len(admitted) / duration_s, 1),
        shed=len(shed),
        shed_with_retry_after=sum(1 for o in shed if o.problem is None),
        server_errors=sum(1 for o in outcomes if o.status >= 500 and o.status != 503),
        wrong=sum(problems.values()),
        problems=dict(problems.most_common(10)),
        admitted_latency=Latency.of([o.latency for o in admitted]),
        shed_latency=Latency.of([o.latency for o in shed]),
    )
