"""A gateway started before its decoder: `/v1/models` asks the decoder itself rather than
reporting the placeholder name until the next poll (a client that used the placeholder would
get 404 for every completion once the poll answered)."""

from __future__ import annotations

import time

import httpx

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import GatewayServer, gateway_settings
from tests.support.redis_server import free_port
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.decoder_info import FALLBACK_MODEL_NAME


def test_models_before_the_first_successful_poll(sid_model: SidModel) -> None:
    port = free_port()
    settings = gateway_settings([f"127.0.0.1:{port}"], info_poll_interval_s=3600)
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        assert http.get("/v1/models").json()["data"][0]["id"] == FALLBACK_MODEL_NAME  # no decoder
        with BackgroundServer(make_settings(sid_model, port=port)):
            deadline = time.monotonic() + 15  # the channel reconnects within its 1 s back-off
            while (name := http.get("/v1/models").json()["data"][0]["id"]) != "model":
                assert time.monotonic() < deadline, f"still {name!r}"
                time.sleep(0.2)
            assert http.get("/v1/models/model").status_code == 200
            body = {"model": "model", "prompt": [1, 2], "max_tokens": 2}
            assert http.post("/v1/completions", json=body).status_code == 200
