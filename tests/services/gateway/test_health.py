"""`/health` as SGLang (and FlashRec's probes) read it: 200 while the gateway can serve — a
decoder answers — even before any catalog is loaded (that is `/readyz`), 503 with Retry-After
when no decoder answers; never behind the API key. `/healthz` stays the process check."""

from __future__ import annotations

import socket

import httpx

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer


def unused_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_health_with_a_decoder_and_an_api_key(decoder_server: BackgroundServer) -> None:
    settings = gateway_settings([decoder_server.address], api_keys=["k-1"])
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        health = http.get("/health")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert http.get("/v1/models").status_code == 401  # the key guards /v1, not /health


def test_health_needs_no_catalog(sid_model: SidModel) -> None:
    with (
        BackgroundServer(make_settings(sid_model, catalog_file=None)) as bare,
        GatewayServer(gateway_settings([bare.address])) as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        assert http.get("/health").status_code == 200
        assert http.get("/readyz").status_code == 503


def test_health_without_decoders() -> None:
    settings = gateway_settings([unused_address()], retry_budget_s=0.5, retry_after_s=3)
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        health = http.get("/health")
        assert health.status_code == 503 and health.headers["Retry-After"] == "3"
        body = health.json()
        assert body["status"] == "unavailable" and "no decoder answers" in body["reason"]
        assert http.get("/healthz").status_code == 200  # the process itself is alive
