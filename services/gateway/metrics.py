"""Prometheus metrics of one gateway app, in its own registry (several apps can share a process,
as tests do, without colliding in the global one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb

if TYPE_CHECKING:  # the pool imports this module's observer type at run time
    from widebeam.services.gateway.decoder_pool import Replica

_BEAM_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "widebeam_gateway_requests", "HTTP requests", ["route", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "widebeam_gateway_request_duration_seconds",
            "HTTP request latency",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.beam_width = Histogram(
            "widebeam_gateway_beam_width",
            "beam width of decoder calls",
            ["route"],
            buckets=_BEAM_BUCKETS,
            registry=r,
        )
        self.widenings = Counter(
            "widebeam_gateway_recommend_widenings",
            "recommend retries with a wider beam after exclusions exhausted it",
            registry=r,
        )
        self.decoder_calls = Counter(
            "widebeam_gateway_decoder_calls",
            "gRPC calls to decoders by outcome",
            ["method", "decoder", "code"],
            registry=r,
        )
        self.decoder_up = Gauge(
            "widebeam_gateway_decoder_up",
            "1 when the last GetInfo answered",
            ["decoder"],
            registry=r,
        )
        self.rows_in_use = Gauge(
            "widebeam_gateway_decoder_rows_in_use", "decoder rows busy", ["decoder"], registry=r
        )
        self.waiting = Gauge(
            "widebeam_gateway_decoder_queue_depth",
            "requests accepted by a decoder, not yet admitted to rows",
            ["decoder"],
            registry=r,
        )
        self.running = Gauge(
            "widebeam_gateway_decoder_running_requests", "running requests", ["decoder"], registry=r
        )
        self.in_flight = Gauge(
            "widebeam_gateway_decoder_in_flight",
            "Generate/Recommend calls this gateway has on the decoder now",
            ["decoder"],
            registry=r,
        )
        self.kv_free = Gauge(
            "widebeam_gateway_decoder_kv_slots_free", "free KV slots", ["decoder"], registry=r
        )
        self.catalog = Gauge(
            "widebeam_gateway_catalog_version_info",
            "1 for the catalog version each decoder serves",
            ["decoder", "catalog", "version"],
            registry=r,
        )
        self.catalog_items = Gauge(
            "widebeam_gateway_catalog_items",
            "items per catalog",
            ["decoder", "catalog"],
            registry=r,
        )
        self._catalog_labels: dict[str, set[tuple[str, str]]] = {}

    def track_in_flight(self, replicas: Sequence[Replica]) -> None:
        """Read each replica's in-flight count at scrape time."""
        for replica in replicas:
            self.in_flight.labels(replica.address).set_function(lambda r=replica: r.in_flight)

    def observe_call(self, method: str, decoder: str, code: str) -> None:
        self.decoder_calls.labels(method, decoder, code).inc()

    def observe_info(self, decoder: str, info: pb.GetInfoResponse | None) -> None:
        self.decoder_up.labels(decoder).set(0 if info is None else 1)
        current: set[tuple[str, str]] = set()
        if info is not None:
            load = info.load
            self.rows_in_use.labels(decoder).set(load.rows_in_use)
            self.waiting.labels(decoder).set(load.waiting_requests)
            self.running.labels(decoder).set(load.running_requests)
            self.kv_free.labels(decoder).set(load.kv_slots_free)
            for cat in info.catalogs:
                current.add((cat.name, cat.version))
                self.catalog.labels(decoder, cat.name, cat.version).set(1)
                self.catalog_items.labels(decoder, cat.name).set(cat.num_items)
        # A swapped-out version must disappear, not linger as a second "current" series.
        for name, version in self._catalog_labels.get(decoder, set()) - current:
            self.catalog.remove(decoder, name, version)
        self._catalog_labels[decoder] = current

    def render(self) -> bytes:
        return generate_latest(self.registry)
