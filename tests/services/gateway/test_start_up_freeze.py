"""The gateway moves what its start-up made out of the collector's view once it is ready (a full
pass over the app's 100k+ objects stopped its event loop for 98-159 ms, bench/gateway_gc.py):
a real gateway started in this process leaves the objects alive at its start frozen."""

from __future__ import annotations

import gc

import httpx

from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer


def test_a_ready_gateway_has_frozen_its_start_up_objects(
    decoder_server: BackgroundServer,
) -> None:
    gc.unfreeze()  # (the decoder fixture froze this process at its own start)
    assert gc.get_freeze_count() == 0
    settings = gateway_settings([decoder_server.address])
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as http:
        frozen = gc.get_freeze_count()
        answered = http.post("/v1/recommend", json={"history": HISTORY, "n": 2})
    assert frozen > 10_000, frozen  # the app, its routes' models, imported code
    assert answered.status_code == 200, answered.text
