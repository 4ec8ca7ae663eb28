"""Phase figures from outcomes."""

from __future__ import annotations

from widebeam.loadgen.outcomes import Outcome, percentile, summarize


def test_nearest_rank_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99
    assert percentile(values, 100) == 100 and percentile([], 99) == 0.0
    assert percentile([7.0], 1) == 7.0


def test_summary_counts_and_latencies() -> None:
    outcomes = [Outcome("r", i / 10, 0.1 + i / 1000, 200) for i in range(90)]
    outcomes += [Outcome("r", 1.0, 0.002, 429) for _ in range(6)]
    outcomes += [Outcome("c", 1.0, 0.003, 503, "503 without a valid Retry-After ('')")]
    outcomes += [Outcome("c", 1.0, 0.5, 502, "unexpected 502: x"), Outcome("c", 1.0, 1.0, 0, "x")]
    summary = summarize("overload", outcomes, 10.0, target_rate=12.0)
    assert summary.sent == 99 and summary.offered_rate == 9.9 and summary.target_rate == 12.0
    assert summary.by_status == {"200": 90, "429": 6, "502": 1, "503": 1, "no_answer": 1}
    assert summary.by_kind == {"c": 3, "r": 96}
    assert summary.admitted == 90 and summary.throughput == 9.0
    assert summary.shed == 7 and summary.shed_with_retry_after == 6
    assert summary.server_errors == 1 and summary.wrong == 3
    assert summary.admitted_latency.p50_ms == 144.0 and summary.admitted_latency.max_ms == 189.0
    assert summary.shed_latency.max_ms == 3.0
    assert summary.as_dict()["admitted_latency"]["p99_ms"] == 189.0  # rank ceil(89.1)
