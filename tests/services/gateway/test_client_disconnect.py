"""A client that disconnects while the gateway waits on its decoder call: the call is
cancelled, the decoder aborts the request (its rows free long before its tokens would have
run out) and the gateway counts it as 499; the gateway goes on serving."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator

import grpc
import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import load, make_settings, wait_until
from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

LONG_TOKENS = 1000  # seconds of decoding on CPU: the disconnect comes long before the end


@pytest.fixture(scope="module")
def decoder(sid_model: SidModel) -> Iterator[BackgroundServer]:
    with BackgroundServer(make_settings(sid_model)) as server:
        yield server


def _send_and_hang_up(port: int, body: dict, stub: pb_grpc.DecoderStub) -> None:
    """POST `body` on a raw connection, wait until the decoder runs it, then close."""
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head + payload)
        wait_until(lambda: load(stub).running_requests == 1, 60, "the long request to run")


def _status_count(metrics: str, status: str) -> float:
    pattern = (
        rf'widebeam_gateway_requests_total\{{method="POST",route="/v1/completions",'
        rf'status="{status}"\}} (\S+)'
    )
    return sum(float(v) for v in re.findall(pattern, metrics))


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_has_its_decoding_aborted(
    decoder: BackgroundServer, stream: bool
) -> None:
    engine = decoder.server.engine
    assert engine is not None
    steps = engine.engine.step_counts
    body = {
        "model": "model", "prompt": [1, 2, 3], "n": 1, "beam_width": 4,
        "max_tokens": LONG_TOKENS, "ignore_eos": True, "stream": stream,
    }  # fmt: skip
    settings = gateway_settings([decoder.address], request_timeout_s=600.0)
    with (
        GatewayServer(settings) as gw,
        grpc.insecure_channel(decoder.address) as channel,
        httpx.Client(base_url=gw.url, timeout=60) as http,
    ):
        stub = pb_grpc.DecoderStub(channel)
        decoded_before = steps.decode_forwards
        _send_and_hang_up(gw.port, body, stub)
        wait_until(lambda: load(stub).running_requests == 0, 60, "the decoder to abort it")
        # aborted, not run out: far fewer decode steps than its tokens
        assert steps.decode_forwards - decoded_before < LONG_TOKENS - 1
        wait_until(lambda: _status_count(http.get("/metrics").text, "499") == 1, 30, "a 499")
        assert _status_count(http.get("/metrics").text, "500") == 0
        # the gateway serves on, and a client that stays gets its answer
        answer = http.post("/v1/recommend", json={"history": HISTORY, "n": 3, "beam_width": 4})
        assert answer.status_code == 200 and len(answer.json()["items"]) == 3
