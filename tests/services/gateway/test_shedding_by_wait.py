"""End to end, a real decoder (tiny model, `max_queue_wait_s=0`) behind a real gateway: a
burst of /v1/recommend beyond capacity gets 429s at once whose Retry-After is the decoder's
(computed from its queue, not the gateway's fixed `retry_after_s`), while every admitted
request is answered 200 with its items. Bounded by counts with generous deadlines: each
request needs all the decoder's rows, so at most one runs at a time."""

from __future__ import annotations

import asyncio

import httpx

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

ROWS = 16
BURST = 24
GATEWAY_RETRY_AFTER = 7  # the gateway's own default, which the decoder's value must replace


def test_a_burst_gets_429_with_the_decoders_retry_after(sid_model: SidModel) -> None:
    decoder = make_settings(sid_model, max_rows=ROWS, max_queue_wait_s=0.0)
    body = {"history": HISTORY, "n": 3, "beam_width": ROWS}

    async def burst(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            first = await http.post("/v1/recommend", json=body)  # alone: admitted
            assert first.status_code == 200, first.text
            return await asyncio.gather(
                *(http.post("/v1/recommend", json=body) for _ in range(BURST))
            )

    with BackgroundServer(decoder) as srv:
        settings = gateway_settings(
            [srv.address], retry_after_s=GATEWAY_RETRY_AFTER, request_timeout_s=120.0
        )
        with GatewayServer(settings) as gw:
            responses = asyncio.run(burst(gw.url))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 429}, [(r.status_code, r.text) for r in responses]
    assert 200 in statuses and 429 in statuses, statuses
    for response in responses:
        if response.status_code == 200:
            assert response.json()["items"], response.text
            continue
        error = response.json()["error"]
        assert error["code"] == "overloaded" and "predicted queue wait" in error["message"]
        retry_after = int(response.headers["Retry-After"])
        assert 1 <= retry_after < GATEWAY_RETRY_AFTER  # the decoder's: its queue is short
