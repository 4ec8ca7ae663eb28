"""Load shedding: at most `max_in_flight_per_decoder` calls per decoder; beyond that on every
replica a model request is a 429 with `Retry-After` at once (pool and HTTP level), unless its
API key is wrong or missing: that stays a 401."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from tests.services.decoder.server.conftest import wait_until
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.cli import build_parser
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.cli import settings_from_args
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.http.errors import ApiError

REQUEST = pb.RecommendRequest(history_item_ids=HISTORY, n=3, beam_width=16)


def _outcomes(results: list[object]) -> list[str]:
    return [
        "ok" if isinstance(r, pb.RecommendResponse) else str(getattr(r, "status", r))
        for r in results
    ]


def test_calls_beyond_the_limit_are_refused_at_once(decoder_server: BackgroundServer) -> None:
    async def scenario() -> tuple[list[object], pb.GetInfoResponse, int, bool]:
        pool = await DecoderPool([decoder_server.address], max_in_flight=2).start()
        try:
            calls = [pool.recommend(REQUEST) for _ in range(6)]
            # GetInfo is never limited: the poller and /readyz must work under load.
            results = await asyncio.gather(*calls, pool.info(), return_exceptions=True)
            return results[:6], results[6], pool.replicas[0].in_flight, pool.saturated()
        finally:
            await pool.close()

    results, info, in_flight_after, saturated_after = asyncio.run(scenario())
    assert _outcomes(results) == ["ok", "ok", "429", "429", "429", "429"]
    refused = results[2]
    assert isinstance(refused, ApiError) and refused.headers == {"Retry-After": "1"}
    assert "max_in_flight_per_decoder" in refused.message and refused.code == "overloaded"
    assert isinstance(info, pb.GetInfoResponse)
    assert in_flight_after == 0 and not saturated_after


def test_a_full_replica_is_skipped_for_one_with_room(decoder_server: BackgroundServer) -> None:
    # Two channels to one server: two replicas as far as the pool can tell.
    async def scenario() -> tuple[list[int], bool, list[object]]:
        addresses = [decoder_server.address, decoder_server.address]
        pool = await DecoderPool(addresses, max_in_flight=1).start()
        try:
            tasks = [asyncio.create_task(pool.recommend(REQUEST)) for _ in range(2)]
            await asyncio.sleep(0)  # both calls are on the wire now
            spread, saturated = [r.in_flight for r in pool.replicas], pool.saturated()
            third = await asyncio.gather(pool.recommend(REQUEST), return_exceptions=True)
            await asyncio.gather(*tasks)
            return spread, saturated, third
        finally:
            await pool.close()

    spread, saturated, third = asyncio.run(scenario())
    assert spread == [1, 1] and saturated
    assert _outcomes(third) == ["429"]


def test_http_requests_are_shed_while_the_decoder_is_full(
    decoder_server: BackgroundServer,
) -> None:
    settings = gateway_settings([decoder_server.address], max_in_flight_per_decoder=1)
    slow = {"model": "model", "prompt": [1, 2, 3], "max_tokens": 1000, "ignore_eos": True}
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as http:
        holder: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: holder.append(http.post("/v1/completions", json=slow))
        )
        thread.start()
        gauge = f'widebeam_gateway_decoder_in_flight{{decoder="{decoder_server.address}"}} 1.0'
        wait_until(lambda: gauge in http.get("/metrics").text, 10, "the slow call in flight")
        shed = http.post("/v1/recommend", json={"history": HISTORY, "n": 2})
        slow_still_running = thread.is_alive()
        chat = http.post("/v1/chat/completions", json={"model": "model", "messages": []})
        models = http.get("/v1/models")
        thread.join(60)
        after = http.post("/v1/recommend", json={"history": HISTORY, "n": 2})
        metrics = http.get("/metrics").text
    assert holder and holder[0].status_code == 200, holder
    assert shed.status_code == 429 and shed.headers["Retry-After"] == "1"
    assert shed.json()["error"]["type"] == "rate_limit_error"
    assert "max_in_flight_per_decoder" in shed.json()["error"]["message"]
    assert slow_still_running, "a shed request must not wait for the slot"
    assert chat.status_code == 429  # shed before its body is even validated
    assert models.status_code == 200  # no decoder call, never shed
    assert after.status_code == 200 and len(after.json()["items"]) == 2
    assert 'route="/v1/recommend",status="429"' in metrics  # counted under its route


def test_a_bad_api_key_is_a_401_even_while_shedding(decoder_server: BackgroundServer) -> None:
    """The key is checked before the load: a wrong or missing key gets its 401 (not a 429
    that invites a retry), a right one the 429, while the decoder is full."""
    settings = gateway_settings(
        [decoder_server.address], max_in_flight_per_decoder=1, api_keys="k-one,k-two"
    )
    slow = {"model": "model", "prompt": [1, 2, 3], "max_tokens": 1000, "ignore_eos": True}
    good = {"Authorization": "Bearer k-two"}
    recommend = {"history": HISTORY, "n": 2}
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as http:
        holder: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: holder.append(http.post("/v1/completions", json=slow, headers=good))
        )
        thread.start()
        gauge = f'widebeam_gateway_decoder_in_flight{{decoder="{decoder_server.address}"}} 1.0'
        wait_until(lambda: gauge in http.get("/metrics").text, 10, "the slow call in flight")
        bad = {
            "missing": http.post("/v1/recommend", json=recommend),
            "wrong": http.post(
                "/v1/recommend", json=recommend, headers={"Authorization": "Bearer k-three"}
            ),
            "not bearer": http.post(
                "/v1/chat/completions", content=b"{not json", headers={"Authorization": "k-one"}
            ),
            "prefix": http.post(
                "/v1/completions", json=slow, headers={"Authorization": "Bearer k-on"}
            ),
        }
        shed = http.post("/v1/recommend", json=recommend, headers=good)
        other_case = http.post(
            "/v1/recommend", json=recommend, headers={"Authorization": "bearer k-one"}
        )
        saturated_during = not holder
        thread.join(60)
        unsaturated_bad = http.post("/v1/recommend", json=recommend)
        after = http.post("/v1/recommend", json=recommend, headers=good)
    assert saturated_during and holder and holder[0].status_code == 200, holder
    for what, response in {**bad, "unsaturated": unsaturated_bad}.items():
        assert response.status_code == 401, (what, response.text)
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="widebeam"'
        assert "Retry-After" not in response.headers, what
        error = response.json()["error"]
        assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
        assert error["message"] == unsaturated_bad.json()["error"]["message"]  # the usual one
    assert shed.status_code == 429 and shed.headers["Retry-After"] == "1", shed.text
    assert other_case.status_code == 429, other_case.text  # the scheme is case-insensitive
    assert after.status_code == 200 and len(after.json()["items"]) == 2


@pytest.mark.parametrize("flag", [None, "7"])
def test_the_limit_is_a_setting(flag: str | None) -> None:
    argv = ["gateway", "serve"] + (["--max-in-flight-per-decoder", flag] if flag else [])
    settings = settings_from_args(build_parser().parse_args(argv))
    assert settings.max_in_flight_per_decoder == (int(flag) if flag else 128)
    assert DecoderPool.from_settings(settings).max_in_flight == settings.max_in_flight_per_decoder
