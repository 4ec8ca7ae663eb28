"""Three real decoder replicas behind a real gateway: while one is busy with a long request,
new requests go to the others, whether the gateway sent the long request itself (its own
outstanding work) or another client did (the load the busy decoder reports through GetInfo)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

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

SHORT = {"history": HISTORY, "n": 3, "beam_width": 4}
LONG_TOKENS = 1000  # holds a replica's rows for seconds on CPU


def recommends_by_decoder(metrics: str) -> dict[str, float]:
    pattern = (
        r'widebeam_gateway_decoder_calls_total\{code="OK",decoder="([^"]+)",'
        r'method="Recommend"\} (\S+)'
    )
    return {m[0]: float(m[1]) for m in re.findall(pattern, metrics)}


def gauge(metrics: str, name: str) -> dict[str, float]:
    pattern = rf'{name}\{{decoder="([^"]+)"\}} (\S+)'
    return {m[0]: float(m[1]) for m in re.findall(pattern, metrics)}


def wait_for(http: httpx.Client, name: str, timeout: float = 20.0) -> str:
    """The one decoder whose gauge `name` is above 0 on the gateway's /metrics."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [d for d, v in gauge(http.get("/metrics").text, name).items() if v > 0]
        if len(busy) == 1:
            return busy[0]
        time.sleep(0.02)
    raise AssertionError(f"no single decoder with {name} > 0 within {timeout}s")


@pytest.fixture(scope="module")
def replicas(sid_model: SidModel) -> Iterator[list[BackgroundServer]]:
    servers = [BackgroundServer(make_settings(sid_model)).start() for _ in range(3)]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


def test_a_replica_busy_with_the_gateways_own_long_call_gets_no_new_ones(
    replicas: list[BackgroundServer],
) -> None:
    long_body = {
        "model": "model", "prompt": [1, 2, 3], "n": 1, "beam_width": 8,
        "max_tokens": LONG_TOKENS, "ignore_eos": True,
    }  # fmt: skip
    # The gateway's deadline ends the long call (the decoder aborts it) once the short calls
    # are counted, instead of waiting out its 1,000 tokens.
    settings = gateway_settings(
        [r.address for r in replicas], info_poll_interval_s=0.1, request_timeout_s=15.0
    )
    with (
        GatewayServer(settings) as gw,
        httpx.Client(base_url=gw.url, timeout=60) as http,
        ThreadPoolExecutor(1) as background,
    ):
        long_call: Future[httpx.Response] = background.submit(
            http.post, "/v1/completions", json=long_body
        )
        busy = wait_for(http, "widebeam_gateway_decoder_in_flight")
        for _ in range(6):
            assert http.post("/v1/recommend", json=SHORT).status_code == 200
        assert not long_call.done(), "the long request ended too soon to test anything"
        used = recommends_by_decoder(http.get("/metrics").text)
        assert used.get(busy, 0.0) == 0.0, used
        # The two idle replicas tie on own work and share the short calls (a poll that caught
        # one mid-call may tip a turn to the other, so not exactly 3 and 3).
        assert sum(used.values()) == 6.0 and len(used) == 2, used
        # finished in time (a fast machine) or ended by the deadline: 503 deadline_exceeded
        answer = long_call.result()
        assert answer.status_code == 200 or (
            answer.status_code == 503 and answer.json()["error"]["code"] == "deadline_exceeded"
        ), answer.text
    with grpc.insecure_channel(busy) as probe:
        stub = pb_grpc.DecoderStub(probe)
        wait_until(lambda: load(stub).rows_in_use == 0, 30, "the long call's rows")


def test_a_replica_busy_with_another_clients_call_is_avoided_by_its_reported_load(
    replicas: list[BackgroundServer],
) -> None:
    long_request = pb.GenerateRequest(
        input_ids=[1, 2, 3], beam_width=8, n=1, max_new_tokens=LONG_TOKENS, ignore_eos=True
    )
    target = replicas[1]
    settings = gateway_settings([r.address for r in replicas], info_poll_interval_s=0.1)
    with (
        grpc.insecure_channel(target.address) as channel,
        GatewayServer(settings) as gw,
        httpx.Client(base_url=gw.url, timeout=60) as http,
    ):
        long_call = pb_grpc.DecoderStub(channel).Generate.future(long_request, timeout=60)
        assert wait_for(http, "widebeam_gateway_decoder_rows_in_use") == target.address
        for _ in range(6):
            assert http.post("/v1/recommend", json=SHORT).status_code == 200
        assert not long_call.done(), "the long request ended too soon to test anything"
        used = recommends_by_decoder(http.get("/metrics").text)
        assert used.get(target.address, 0.0) == 0.0, used
        assert sum(used.values()) == 6.0, used
        # Its answer is not this test's subject: cancelled, its rows are freed at once instead
        # of after the rest of its 1,000 tokens.
        long_call.cancel()
        with grpc.insecure_channel(target.address) as probe:
            stub = pb_grpc.DecoderStub(probe)
            wait_until(lambda: load(stub).rows_in_use == 0, 30, "the cancelled call's rows")
