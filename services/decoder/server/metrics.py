"""The decoder's Prometheus metrics, in its own registry, served over HTTP on `metrics_port`.

`widebeam_decoder_graph_captures_total{kind, phase}`: CUDA graphs captured, by graph kind and by
whether before the decoder reported ready (`startup`) or while serving (`serving`, the lazy
fallback: a shape the start-up list missed; it should stay 0). Read from the engine's
`CaptureCounts` at scrape time, every label pair always present (0 on CPU, which has no graphs).
"""

from __future__ import annotations

from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from widebeam.services.decoder.runner.capture_counts import CaptureCounts

GRAPH_CAPTURES = "widebeam_decoder_graph_captures"  # exposed with the counter's _total suffix


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


class DecoderMetrics:
    def __init__(self, counts: CaptureCounts) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CaptureCollector(counts))
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
