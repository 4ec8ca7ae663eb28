"""The evaluation's result: quality at each K, invalid and duplicate rates, speed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from widebeam.eval.metrics import METRICS, cutoffs, mean_scores, sample_scores
from widebeam.eval.runner import RunResult
from widebeam.eval.samples import Level

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class EvalReport:
    data: str
    route: str
    level: str
    n: int
    beam_width: int
    concurrency: int
    samples: int  # answered and scored
    errors: int  # samples whose request failed (not scored)
    ks: tuple[int, ...]
    metrics: dict[str, float]  # "recall@10" -> mean over the answered samples
    invalid_rate: float  # invalid beams / returned beams
    duplicate_rate: float  # beams repeating an earlier beam's SID / returned beams
    qps: float
    wall_s: float
    latency_ms: dict[str, float]  # "mean", "p50", "p90", "p95", "p99", "max"
    first_errors: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    def markdown(self) -> str:
        lines = ["| K | " + " | ".join(METRICS) + " |", "|---:|" + "---:|" * len(METRICS)]
        for k in self.ks:
            values = " | ".join(f"{self.metrics[f'{m}@{k}']:.4f}" for m in METRICS)
            lines.append(f"| {k} | {values} |")
        lat = self.latency_ms
        lines += [
            "",
            "| samples | errors | invalid | duplicates | QPS | mean ms | "
            + " | ".join(f"p{p} ms" for p in PERCENTILES) + " |",
            "|---:|---:|---:|---:|---:|---:|" + "---:|" * len(PERCENTILES),
            f"| {self.samples} | {self.errors} | {100 * self.invalid_rate:.2f}% | "
            f"{100 * self.duplicate_rate:.2f}% | {self.qps:.2f} | {lat['mean']:.1f} | "
            + " | ".join(f"{lat[f'p{p}']:.1f}" for p in PERCENTILES) + " |",
            "",
            f"{self.route}, {self.level} level, n={self.n}, beam width {self.beam_width}, "
            f"concurrency {self.concurrency}, {self.data}",
        ]  # fmt: skip
        return "\n".join(lines)


def build_report(
    result: RunResult, level: Level, data: str, concurrency: int, ks: tuple[int, ...] | None
) -> EvalReport:
    answered = [o for o in result.outcomes if o.prediction is not None]
    failed = [o.error for o in result.outcomes if o.error is not None]
    n = result.request.n
    cut = cutoffs(n) if ks is None else cutoffs(n, ks)
    scores = [
        sample_scores(o.prediction.ranked, o.sample.targets, cut)
        for o in answered
        if o.prediction is not None
    ]
    returned = sum(o.prediction.returned for o in answered if o.prediction is not None) or 1
    invalid = sum(o.prediction.invalid for o in answered if o.prediction is not None)
    duplicates = sum(o.prediction.duplicates for o in answered if o.prediction is not None)
    routes = sorted({o.sample.route.value for o in result.outcomes})
    return EvalReport(
        data=data,
        route=", ".join(routes),
        level=level.value,
        n=n,
        beam_width=result.request.beam_width,
        concurrency=concurrency,
        samples=len(answered),
        errors=len(failed),
        ks=cut,
        metrics=mean_scores(scores, cut),
        invalid_rate=invalid / returned,
        duplicate_rate=duplicates / returned,
        qps=len(answered) / result.wall_s if result.wall_s > 0 else 0.0,
        wall_s=result.wall_s,
        latency_ms=_latency_ms([o.latency_s for o in answered]),
        first_errors=tuple(failed[:5]),
    )


def _latency_ms(latencies_s: list[float]) -> dict[str, Any]:
    ms = np.array(latencies_s or [0.0], dtype=np.float64) * 1000.0  # [samples]
    out = {"mean": float(ms.mean())}
    out |= {f"p{p}": float(np.percentile(ms, p)) for p in PERCENTILES}
    out["max"] = float(ms.max())
    return out
