"""Two decoder replicas: idle ones share calls, failover when one stops, 503 + Retry-After when
both do. Also 429 + Retry-After when a decoder's waiting queue is full."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from tests.support.redis_server import free_port
from widebeam.services.decoder.server.background import BackgroundServer

BODY = {"history": HISTORY, "n": 3, "beam_width": 4}


def calls_by_decoder(metrics: str) -> dict[str, float]:
    pattern = (
        r'widebeam_gateway_decoder_calls_total\{code="OK",decoder="([^"]+)",'
        r'method="Recommend"\} (\S+)'
    )
    return {m[0]: float(m[1]) for m in re.findall(pattern, metrics)}


def test_failover_then_outage(sid_model: SidModel) -> None:
    first = BackgroundServer(make_settings(sid_model)).start()
    second = BackgroundServer(make_settings(sid_model)).start()
    stopped: list[BackgroundServer] = []
    try:
        settings = gateway_settings([first.address, second.address], retry_after_s=3)
        with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
            for _ in range(4):
                assert http.post("/v1/recommend", json=BODY).status_code == 200
            used = calls_by_decoder(http.get("/metrics").text)
            # Idle replicas tie on load and share the calls (test_least_loaded.py: busy ones).
            assert set(used) == {first.address, second.address}, used
            assert sum(used.values()) == 4.0, used

            first.stop()
            stopped.append(first)
            for _ in range(6):
                response = http.post("/v1/recommend", json=BODY)
                assert response.status_code == 200, response.text
            assert http.get("/readyz").status_code == 200

            second.stop()
            stopped.append(second)
            response = http.post("/v1/recommend", json=BODY)
            assert response.status_code == 503, response.text
            assert response.headers["Retry-After"] == "3"
            assert response.json()["error"]["code"] == "decoder_unavailable"
            ready = http.get("/readyz")
            assert ready.status_code == 503 and ready.json()["status"] == "not_ready"
            assert http.get("/healthz").status_code == 200
    finally:
        for server in (first, second):
            if server not in stopped:
                server.stop()


def test_a_dead_address_in_the_list_is_skipped(decoder_server: BackgroundServer) -> None:
    dead = f"127.0.0.1:{free_port()}"
    settings = gateway_settings([dead, decoder_server.address])
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        for _ in range(4):
            assert http.post("/v1/recommend", json=BODY).status_code == 200
        metrics = http.get("/metrics").text
        assert f'widebeam_gateway_decoder_up{{decoder="{dead}"}} 0.0' in metrics


@pytest.fixture(scope="module")
def small_decoder(sid_model: SidModel) -> Iterator[BackgroundServer]:
    with BackgroundServer(make_settings(sid_model, max_rows=8, max_waiting=1)) as srv:
        yield srv


def test_overload_is_429_with_retry_after(small_decoder: BackgroundServer) -> None:
    # Each request holds all 8 rows for a while; the queue takes one more; the rest: 429.
    body = {
        "model": "model", "prompt": [1, 2, 3], "n": 1, "beam_width": 8, "max_tokens": 150,
        "ignore_eos": True,
    }  # fmt: skip
    settings = gateway_settings([small_decoder.address], retry_after_s=2)
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as http:
        with ThreadPoolExecutor(10) as pool:
            responses = list(pool.map(lambda _: http.post("/v1/completions", json=body), range(10)))
        statuses = sorted(r.status_code for r in responses)
        assert set(statuses) == {200, 429}, statuses
        rejected = [r for r in responses if r.status_code == 429]
        # The gateway's retry_after_s (2) until the decoder has timed a step; from then on the
        # decoder's own estimate from its queue (its `retry-after`): a whole number of seconds.
        assert all(r.headers["Retry-After"].isdigit() for r in rejected), rejected
        assert all(int(r.headers["Retry-After"]) >= 1 for r in rejected)
        assert all(r.json()["error"]["type"] == "rate_limit_error" for r in rejected)


def test_deadline_is_503_with_retry_after(decoder_server: BackgroundServer) -> None:
    body = {
        "model": "model", "prompt": [1, 2, 3], "beam_width": 8, "max_tokens": 1000,
        "ignore_eos": True,
    }  # fmt: skip
    settings = gateway_settings([decoder_server.address], request_timeout_s=0.3)
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        response = http.post("/v1/completions", json=body)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "deadline_exceeded"
        assert response.headers["Retry-After"] == "1"
