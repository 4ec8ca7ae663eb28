"""deploy/monitoring: the Grafana dashboard and the alert rules only query metrics the code
exports (or the Redis exporter's), and Prometheus / Grafana provisioning fit the compose file."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import (
    MONITORING,
    REDIS_EXPORTER_METRICS,
    SERVICE_PORTS,
    compose_services,
    exported_series,
    promql_metrics,
)

DASHBOARD = MONITORING / "grafana" / "dashboards" / "widebeam.json"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _all_exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


def _check_names(where: str, expr: str) -> None:
    names = promql_metrics(expr)
    assert names, f"{where}: no widebeam_* / redis_* metric in {expr!r}"
    exported = exported_series()
    for name in names:
        if name.startswith("widebeam_"):
            assert name in exported, f"{where}: {name} is not exported by the code"
        else:
            assert name in REDIS_EXPORTER_METRICS, f"{where}: unknown metric {name}"


def test_dashboard_parses_with_unique_ids_and_a_layout() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"


@pytest.mark.parametrize("title", [p["title"] for p in _panels()])
def test_panel_queries_reference_exported_metrics(title: str) -> None:
    (panel,) = [p for p in _panels() if p["title"] == title]
    assert panel["datasource"]["uid"] == "${datasource}"
    assert panel["targets"], title
    for target in panel["targets"]:
        assert target["datasource"]["uid"] == "${datasource}"
        _check_names(title, target["expr"])


def test_dashboard_covers_the_stack() -> None:
    exprs = "\n".join(_all_exprs())
    wanted = {
        "request rate": "rate(widebeam_gateway_requests_total",
        "latency percentiles": "histogram_quantile(0.99, sum by (le) "
        "(rate(widebeam_gateway_request_duration_seconds_bucket",
        "rows in use": "widebeam_gateway_decoder_rows_in_use",
        "queue depth": "widebeam_gateway_decoder_queue_depth",
        "catalog version": "widebeam_catalog_current_version",
        "served versions": "widebeam_gateway_catalog_version_info",
        "batch progress": 'redis_key_size{key="widebeam.batch"}',
    }
    missing = [topic for topic, fragment in wanted.items() if fragment not in exprs]
    assert not missing, missing


def test_batch_queue_panel_watches_the_configured_queue() -> None:
    from widebeam.services.gateway.batch.settings import BatchSettings

    queue = BatchSettings.model_fields["queue"].default
    exporter = compose_services()["redis-exporter"]["environment"]
    assert f"db0={queue}" in exporter["REDIS_EXPORTER_CHECK_SINGLE_KEYS"]
    assert f'key="{queue}"' in "\n".join(_all_exprs())


def test_alert_rules_reference_exported_metrics() -> None:
    rules = yaml.safe_load((MONITORING / "prometheus" / "alerts.yml").read_text())
    count = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            _check_names(rule["alert"], rule["expr"])
            assert rule["annotations"]["summary"]
            count += 1
    assert count >= 3


def test_prometheus_scrapes_the_services_on_their_ports() -> None:
    config = yaml.safe_load((MONITORING / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for service in ("gateway", "catalog"):
        (sd,) = jobs[f"widebeam-{service}"]["dns_sd_configs"]
        assert sd["names"] == [service] and sd["port"] == SERVICE_PORTS[service]
        assert service in compose_services()
    assert jobs["redis"]["static_configs"][0]["targets"] == ["redis-exporter:9121"]
    # rule files live in the directory compose mounts at /etc/prometheus
    mounts = compose_services()["prometheus"]["volumes"]
    assert "./deploy/monitoring/prometheus:/etc/prometheus:ro" in mounts
    for rule_file in config["rule_files"]:
        assert (MONITORING / "prometheus" / rule_file.removeprefix("/etc/prometheus/")).exists()


def test_grafana_provisioning_matches_the_compose_mounts() -> None:
    provisioning = MONITORING / "grafana" / "provisioning"
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert datasource["uid"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "widebeam.yml").read_text())[
        "providers"
    ]
    grafana = compose_services()["grafana"]
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"]}
    assert mounts["./deploy/monitoring/grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./deploy/monitoring/grafana/provisioning"] == "/etc/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
