"""`timeout_ms` on /v1/recommend: the caller's own deadline, within the gateway's. Bad values
are 400s naming the field; end to end (a real decoder, tiny model), a request whose deadline
falls before the queue ahead of it drains is refused, while the same request without one waits
and is answered. The queue is a Generate of thousands of steps holding every row: seconds on
any machine, against a 300 ms deadline."""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import load, make_settings, wait_until
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

ROWS = 16
BODY = {"history": HISTORY, "n": 3, "beam_width": ROWS}


@pytest.mark.parametrize("bad", [0, -5, "50", 1.5, True, [50], {"ms": 50}])
def test_a_bad_timeout_is_a_400_naming_it(client: httpx.Client, bad: object) -> None:
    response = client.post("/v1/recommend", json=BODY | {"timeout_ms": bad})
    assert response.status_code == 400, response.text
    assert "timeout_ms" in response.text


def test_a_timeout_beyond_the_gateways_is_the_gateways(client: httpx.Client) -> None:
    for timeout_ms in (60_000, 10**12):  # the fixture's gateway allows less than either
        response = client.post("/v1/recommend", json=BODY | {"timeout_ms": timeout_ms})
        assert response.status_code == 200, response.text
        assert len(response.json()["items"]) == 3
    # null is the default (the gateway's timeout)
    assert client.post("/v1/recommend", json=BODY | {"timeout_ms": None}).status_code == 200


def test_a_deadline_shorter_than_the_queue_is_refused_before_the_queue_drains(
    sid_model: SidModel,
) -> None:
    # A long Generate holds every row for thousands of steps (seconds on any CPU); a
    # recommend that must wait for it cannot meet a 300 ms deadline: it is refused, at once
    # (429, the decoder's prediction) or when its deadline passes in the queue (503), while
    # the long request still runs. Without a deadline of its own it waits and gets its items.
    decoder = make_settings(sid_model, max_rows=ROWS, max_kv_slots=65536)
    long = pb.GenerateRequest(input_ids=[1, 2, 3], beam_width=ROWS, n=1, max_new_tokens=3000,
                              custom_eos=True)  # fmt: skip
    with BackgroundServer(decoder) as srv:
        settings = gateway_settings([srv.address], request_timeout_s=300.0)
        with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=300) as http:
            assert http.post("/v1/recommend", json=BODY).status_code == 200  # times a step
            with grpc.insecure_channel(srv.address) as channel:
                stub = pb_grpc.DecoderStub(channel)
                running = stub.Generate.future(long, timeout=600)
                wait_until(lambda: load(stub).rows_in_use == ROWS, 60, "the long request to run")
                refused = http.post("/v1/recommend", json=BODY | {"timeout_ms": 300})
                still_running = not running.done()
                waited = asyncio.run(_recommend_while(gw.url, running))
    assert still_running, "the long request ended before the deadline passed"
    assert refused.status_code in (429, 503), refused.text
    error = refused.json()["error"]
    if refused.status_code == 429:
        assert error["code"] == "overloaded" and "past its deadline" in error["message"]
        assert int(refused.headers["Retry-After"]) >= 1
    else:
        assert error["code"] == "deadline_exceeded", refused.text
    assert waited.status_code == 200 and len(waited.json()["items"]) == 3, waited.text


async def _recommend_while(url: str, running: grpc.Future) -> httpx.Response:
    """A recommend without a deadline of its own, sent while `running` runs, then `running`
    cancelled: it waits for the rows and is answered."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        pending = asyncio.ensure_future(http.post("/v1/recommend", json=BODY))
        await asyncio.sleep(0.5)
        assert not pending.done(), "answered while every row was held"
        running.cancel()
        return await pending
