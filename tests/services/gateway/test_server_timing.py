"""`Server-Timing` on the gateway's responses (real gateway, real decoder, tiny model): a
recommend's header holds its decoder call and the gateway's own time, the decoder's inside the
app's; an answer that made no decoder call holds the app's alone; the setting turns it off."""

from __future__ import annotations

import re

import httpx

from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.server_timing import RequestTiming, header_value

ENTRY = re.compile(r'^(\w+);dur=(\d+\.\d)(?:;desc="([^"]*)")?$')
BODY = {"history": HISTORY, "n": 3, "beam_width": 4}


def timings(response: httpx.Response) -> dict[str, tuple[float, str | None]]:
    """name -> (ms, description) of the response's Server-Timing entries."""
    parsed = {}
    for entry in response.headers["server-timing"].split(", "):
        match = ENTRY.match(entry)
        assert match, f"not a Server-Timing entry: {entry!r}"
        parsed[match[1]] = (float(match[2]), match[3])
    return parsed


def test_a_recommend_shows_its_decoder_call_within_the_gateways_time(
    client: httpx.Client,
) -> None:
    response = client.post("/v1/recommend", json=BODY)
    assert response.status_code == 200, response.text
    entries = timings(response)
    assert set(entries) == {"decoder", "app"}
    decoder_ms, calls = entries["decoder"]
    app_ms, _ = entries["app"]
    assert calls == "1 call"
    assert 0 < decoder_ms <= app_ms  # the decoder's call ran inside the app's time


def test_an_answer_without_a_decoder_call_shows_the_app_alone(client: httpx.Client) -> None:
    bad = client.post("/v1/recommend", json=BODY | {"n": -1})  # refused before any call
    assert bad.status_code == 400, bad.text
    assert set(timings(bad)) == {"app"}
    health = client.get("/healthz")
    assert set(timings(health)) == {"app"}


def test_the_setting_turns_the_header_off(decoder_server: BackgroundServer) -> None:
    settings = gateway_settings([decoder_server.address], server_timing=False)
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as http:
        response = http.post("/v1/recommend", json=BODY)
    assert response.status_code == 200, response.text
    assert "server-timing" not in response.headers


def test_several_calls_are_summed_and_counted() -> None:
    timing = RequestTiming()
    timing.decoder_s, timing.decoder_calls = 0.25, 3
    assert header_value(timing, 0.3) == 'decoder;dur=250.0;desc="3 calls", app;dur=300.0'
    assert header_value(RequestTiming(), 0.0125) == "app;dur=12.5"
