"""The decoder's Prometheus metrics, in its own registry, served over HTTP on `metrics_port`.

`widebeam_decoder_graph_captures_total{kind, phase}`: CUDA graphs captured, by graph kind and by
whether before the decoder reported ready (`startup`) or while serving (`serving`, the lazy
fallback: a shape the start-up list missed; it should stay 0). Read from the engine's
`CaptureCounts` at scrape time, every label pair always present (0 on CPU, which has no graphs).

The prompt-prefix cache (`kv/prefix_cache.py`), read from its stats at scrape time:
`widebeam_decoder_prefix_cache_prompt_tokens_total` (prompt tokens admitted) and
`_hit_tokens_total` (of those, read from cached prefixes: the hit rate is their rates' ratio),
`_hit_ratio` (the same since start), `_pages{state}` (cached pages `held` by running requests or
`unheld`, which eviction may give back) and `_evicted_pages_total`. All 0 with the cache off.

How well arrivals batch (`runner/step_counts.py`): `widebeam_decoder_forwards_total{kind}` (prefill
/ decode forwards run), `widebeam_decoder_forward_rows_total{kind}` (prompt tokens computed by
prefills, rows of decode forwards: per forward, how full),
`widebeam_decoder_prefilled_requests_total` (requests those prefills held: per prefill forward, the
batch), `widebeam_decoder_eager_prefills_total` (prefill forwards launched op by op: past
`max_prefill_graph_tokens`, the limit low for this traffic, or with no prefill graphs at all) and
`_split_prefills_total` (such batches run as graph-sized batches instead, with
`prefill_graph_split`), `widebeam_decoder_beam_expansions_total` (streamed beam steps launched, one
per cohort batch), `widebeam_decoder_step_seconds_total` (wall time in engine steps: over wall time,
how busy the engine is), `widebeam_decoder_group_waits_total` / `_group_wait_seconds_total`
(intakes that waited for a group's next requests, `server/async_engine.py`), and
`widebeam_decoder_inbox_requests_total` / `widebeam_decoder_inbox_seconds_total` (requests the
engine thread took from the server's inbox, and the time they waited there: a request that
arrives after the intakes of the step it arrived in waits for the next one).
"""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from widebeam.services.decoder.kv.prefix_cache import PrefixCache
from widebeam.services.decoder.runner.capture_counts import CaptureCounts
from widebeam.services.decoder.runner.step_counts import StepCounts
from widebeam.services.decoder.scheduler.finish_calibration import FinishCalibration

GRAPH_CAPTURES = "widebeam_decoder_graph_captures"  # exposed with the counter's _total suffix
PREFIX_CACHE = "widebeam_decoder_prefix_cache"  # the prefix-cache metrics' common prefix
FORWARDS = "widebeam_decoder_forwards"
PREFILLED_REQUESTS = "widebeam_decoder_prefilled_requests"
EAGER_PREFILLS = "widebeam_decoder_eager_prefills"
SPLIT_PREFILLS = "widebeam_decoder_split_prefills"
BEAM_EXPANSIONS = "widebeam_decoder_beam_expansions"
FORWARD_ROWS = "widebeam_decoder_forward_rows"
STEP_SECONDS = "widebeam_decoder_step_seconds"
GROUP_WAITS = "widebeam_decoder_group_waits"
GROUP_WAIT_SECONDS = "widebeam_decoder_group_wait_seconds"
INBOX_REQUESTS = "widebeam_decoder_inbox_requests"
INBOX_SECONDS = "widebeam_decoder_inbox_seconds"
FINISH_CALIBRATION = "widebeam_decoder_finish_calibration"


class _CaptureCollector(Collector):
    def __init__(self, counts: CaptureCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            GRAPH_CAPTURES,
            "CUDA graphs captured, by graph kind and phase (startup: before ready; serving: after)",
            labels=["kind", "phase"],
        )
        for (kind, phase), count in sorted(self.counts.counts.items()):
            family.add_metric([kind.value, phase.value], count)
        yield family


class _PrefixCacheCollector(Collector):
    def __init__(self, cache: PrefixCache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        stats = self.cache.stats()  # plain ints, read while the engine thread runs
        for name, text, value in (
            ("prompt_tokens", "prompt tokens of admitted requests", stats.prompt_tokens),
            ("hit_tokens", "prompt tokens read from cached prefixes", stats.hit_tokens),
            ("evicted_pages", "cached prefix pages evicted", stats.evicted_pages),
        ):
            yield CounterMetricFamily(f"{PREFIX_CACHE}_{name}", text, value=value)
        yield GaugeMetricFamily(
            f"{PREFIX_CACHE}_hit_ratio",
            "hit tokens / prompt tokens since start",
            value=stats.hit_ratio,
        )
        pages = GaugeMetricFamily(
            f"{PREFIX_CACHE}_pages",
            "cached prefix pages: held by running requests, or unheld (evictable)",
            labels=["state"],
        )
        pages.add_metric(["held"], stats.cached_pages - stats.unheld_pages)
        pages.add_metric(["unheld"], stats.unheld_pages)
        yield pages


class _StepCollector(Collector):
    def __init__(self, counts: StepCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        counts = self.counts
        forwards = CounterMetricFamily(FORWARDS, "model forwards run, by kind", labels=["kind"])
        forwards.add_metric(["prefill"], counts.prefill_forwards)
        forwards.add_metric(["decode"], counts.decode_forwards)
        yield forwards
        rows = CounterMetricFamily(
            FORWARD_ROWS, "prompt tokens computed (prefill), rows run (decode)", labels=["kind"]
        )
        rows.add_metric(["prefill"], counts.prefill_tokens)
        rows.add_metric(["decode"], counts.decode_rows)
        yield rows
        scalars = (  # (name, help, value)
            (PREFILLED_REQUESTS, "requests prefilled (over prefill forwards: the batch)",
             counts.prefilled_requests),
            (EAGER_PREFILLS, "prefill forwards launched op by op (past max_prefill_graph_tokens, "
             "or no prefill graphs)",
             counts.eager_prefills),
            (SPLIT_PREFILLS, "prefill batches past max_prefill_graph_tokens run as graph-sized "
             "batches (prefill_graph_split)", counts.split_prefills),
            (BEAM_EXPANSIONS, "streamed beam steps launched, one per cohort batch",
             counts.beam_expansions),
            (STEP_SECONDS, "wall time in engine steps (over wall time: how busy the engine is)",
             counts.step_seconds),
            (GROUP_WAITS, "intakes that waited for a group's next requests", counts.group_waits),
            (GROUP_WAIT_SECONDS, "time intakes waited for a group's next requests",
             counts.group_wait_seconds),
            (INBOX_REQUESTS, "requests the engine thread took from the inbox",
             counts.inbox_requests),
            (INBOX_SECONDS, "time requests waited in the inbox (over inbox requests: the mean "
             "wait)", counts.inbox_seconds),
        )  # fmt: skip
        for name, help_text, value in scalars:
            yield CounterMetricFamily(name, help_text, value=value)


class _CalibrationCollector(Collector):
    def __init__(self, calibration: FinishCalibration) -> None:
        self.calibration = calibration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            FINISH_CALIBRATION,
            "what predicted finishes are multiplied by before they are held against deadlines "
            "(a high quantile of how late recent requests finished against prediction; 1 until "
            "enough were seen)",
            value=self.calibration.factor(),
        )


class DecoderMetrics:
    def __init__(
        self,
        counts: CaptureCounts,
        prefix_cache: PrefixCache | None = None,
        steps: StepCounts | None = None,
        calibration: FinishCalibration | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CaptureCollector(counts))
        if calibration is not None:
            self.registry.register(_CalibrationCollector(calibration))
        if steps is not None:
            self.registry.register(_StepCollector(steps))
        if prefix_cache is not None:
            self.registry.register(_PrefixCacheCollector(prefix_cache))
        self._server: WSGIServer | None = None

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on a background thread; returns the bound port (port 0: a free one)."""
        try:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ValueError(f"cannot serve metrics on {host}:{port}: {exc}") from None
        return int(self._server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
