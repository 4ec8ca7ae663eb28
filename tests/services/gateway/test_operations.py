"""/healthz, /readyz, /metrics, /docs."""

from __future__ import annotations

import httpx

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer


def test_health_and_readiness(client: httpx.Client, decoder_server: BackgroundServer) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["model"] == "model"
    assert body["catalogs"]["default"].startswith("file-")
    assert body["decoders"] == {decoder_server.address: True}


def test_not_ready_without_a_catalog(sid_model: SidModel) -> None:
    with (
        BackgroundServer(make_settings(sid_model, catalog_file=None)) as bare,
        GatewayServer(gateway_settings([bare.address])) as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        ready = http.get("/readyz")
        assert ready.status_code == 503 and "Retry-After" in ready.headers
        assert "no catalog" in ready.json()["reason"]
        # Unconstrained generation still works without a catalog.
        body = {"model": "model", "prompt": [1, 2], "max_tokens": 2}
        assert http.post("/v1/completions", json=body).status_code == 200
        response = http.post("/v1/recommend", json={"history": HISTORY})
        assert response.status_code == 404 and "loaded: none" in response.text


def test_metrics(client: httpx.Client) -> None:
    client.post("/v1/recommend", json={"history": HISTORY, "n": 2, "beam_width": 16})
    client.post("/v1/recommend", json={"history": []})
    client.get("/v1/does-not-exist")

    def text() -> str:
        return client.get("/metrics").text

    metrics = text()
    assert (
        'widebeam_gateway_requests_total{method="POST",route="/v1/recommend",status="200"}'
        in metrics
    )
    assert 'route="/v1/recommend",status="400"' in metrics
    assert 'route="unmatched",status="404"' in metrics  # raw unknown paths never become labels
    assert 'widebeam_gateway_request_duration_seconds_bucket{le="0.005",route="/v1/recommend"}' in (
        metrics
    )
    assert 'widebeam_gateway_beam_width_bucket{le="16.0",route="/v1/recommend"}' in metrics
    # decoder gauges from the periodic GetInfo poll
    for name in ("decoder_rows_in_use", "decoder_queue_depth", "decoder_running_requests",
                 "decoder_kv_slots_free", "decoder_up"):  # fmt: skip
        assert f"widebeam_gateway_{name}{{decoder=" in metrics, name
    wait_until(lambda: 'catalog="default"' in text(), 5.0, "the catalog version gauge")
    assert 'widebeam_gateway_catalog_version_info{catalog="default",decoder=' in text()


def test_openapi_docs(client: httpx.Client) -> None:
    assert "swagger" in client.get("/docs").text.lower()
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/recommend", "/v1/completions", "/v1/chat/completions", "/v1/models"):
        assert path in paths
