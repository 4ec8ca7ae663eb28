"""Prometheus metrics of one app instance (its own registry: no import-time globals, so several
apps in one process — tests — never collide).

``widebeam_catalog_current_version{catalog}`` is read from Redis at scrape time, so it reflects
activations made by any replica or by hand; ``widebeam_catalog_redis_up`` says whether that
read worked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

OUTCOMES = ("published", "invalid", "too_large", "bad_request", "unavailable", "aborted", "error")
_BUILD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)


class _CurrentVersions(Collector):
    def __init__(self, read: Callable[[], dict[str, int | None]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        current = GaugeMetricFamily(
            "widebeam_catalog_current_version",
            "Version that `current` points at, per catalog",
            labels=["catalog"],
        )
        up = GaugeMetricFamily("widebeam_catalog_redis_up", "1 when Redis answered the scrape")
        try:
            versions = self._read()
        except Exception:  # a scrape must never fail because Redis is down
            up.add_metric([], 0)
        else:
            up.add_metric([], 1)
            for name, version in sorted(versions.items()):
                if version is not None:
                    current.add_metric([name], version)
        yield current
        yield up


class Metrics:
    def __init__(self, read_current: Callable[[], dict[str, int | None]]) -> None:
        self.registry = CollectorRegistry()
        self.uploads = Counter(
            "widebeam_catalog_uploads",
            "Catalog uploads by outcome",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.uploads.labels(outcome)  # export zeros so rate() works from the start
        self.upload_bytes = Counter(
            "widebeam_catalog_upload_bytes",
            "Request body bytes received by uploads (as sent, before gunzip)",
            registry=self.registry,
        )
        self.build_seconds = Histogram(
            "widebeam_catalog_build_seconds",
            "Parse + validate + trie build time of accepted and rejected uploads",
            buckets=_BUILD_BUCKETS,
            registry=self.registry,
        )
        self.publish_seconds = Histogram(
            "widebeam_catalog_publish_seconds",
            "Time to write a built catalog version to Redis",
            buckets=_BUILD_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_CurrentVersions(read_current))
