"""Bad input over gRPC: malformed and extreme Generate / Recommend requests and garbage on the
wire against a real decoder. Each is answered INVALID_ARGUMENT (RESOURCE_EXHAUSTED for the
message size limit), and afterwards the decoder still answers a valid request exactly as it did
before (never crashed, never wedged, no rows or KV leaked)."""

from __future__ import annotations

import math
import socket
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MESSAGE_LIMIT = 1 << 20  # the decoder's max_message_bytes in this module
PROMPT = [5, 6, 7]
VALID = pb.GenerateRequest(input_ids=PROMPT, beam_width=4, n=2, max_new_tokens=3)
GENERATE = "/widebeam.decoder.v1.Decoder/Generate"
TALLY: Counter[str] = Counter()


@pytest.fixture(scope="module")
def server(sid_model: SidModel) -> Iterator[BackgroundServer]:
    settings = make_settings(sid_model, max_message_bytes=MESSAGE_LIMIT, max_rows=32)
    with BackgroundServer(settings) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    options = [("grpc.max_send_message_length", 64 << 20)]  # let oversized calls leave
    with grpc.insecure_channel(server.address, options=options) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.DecoderStub:
    return pb_grpc.DecoderStub(channel)


@pytest.fixture(scope="module")
def baseline(stub: pb_grpc.DecoderStub) -> pb.GenerateResponse:
    return stub.Generate(VALID, timeout=60)


def gen(**fields: Any) -> pb.GenerateRequest:
    return pb.GenerateRequest(**{"input_ids": PROMPT, "max_new_tokens": 3, **fields})


NAN, INF = math.nan, math.inf
GENERATE_CASES: dict[str, pb.GenerateRequest] = {
    "k=0": gen(beam_width=0),
    "k<0": gen(beam_width=-3),
    "k huge": gen(beam_width=INT32_MAX),
    "k over max_rows": gen(beam_width=33),
    "n>k": gen(beam_width=2, n=3),
    "n=0": gen(beam_width=2, n=0),
    "n<0": gen(n=-1),
    "empty prompt": gen(input_ids=[]),
    "negative id": gen(input_ids=[5, -1]),
    "id = vocab": gen(input_ids=[5, 10**6]),
    "id int64 max": gen(input_ids=[INT64_MAX]),
    "id int64 min": gen(input_ids=[-(2**63)]),
    "max_new_tokens 0": gen(max_new_tokens=0),
    "max_new_tokens <0": gen(max_new_tokens=-1),
    "max_new_tokens huge": gen(max_new_tokens=10**6),
    "max_new_tokens int32 max": gen(max_new_tokens=INT32_MAX),
    "kv slots over the cache": gen(beam_width=32, max_new_tokens=4000),
    "min > max new tokens": gen(max_new_tokens=2, min_new_tokens=3),
    "min_new_tokens <0": gen(min_new_tokens=-1),
    "length_penalty nan": gen(beam_width=2, length_penalty=NAN),
    "length_penalty inf": gen(beam_width=2, length_penalty=INF),
    "length_penalty -inf": gen(beam_width=2, length_penalty=-INF),
    "length_penalty 1e308": gen(beam_width=2, length_penalty=1e308),
    "temperature nan": gen(temperature=NAN),
    "temperature inf": gen(temperature=INF),
    "temperature <0": gen(temperature=-1.0),
    "temperature 5e-324": gen(temperature=5e-324),
    "temperature 1e-40": gen(temperature=1e-40),
    "sampling with beams": gen(beam_width=2, temperature=0.7),
    "top_p nan": gen(temperature=0.7, top_p=NAN),
    "top_p 0": gen(temperature=0.7, top_p=0.0),
    "top_p >1": gen(temperature=0.7, top_p=1.5),
    "top_p inf": gen(temperature=0.7, top_p=INF),
    "top_k <0": gen(temperature=0.7, top_k=-1),
    "early_stopping unknown enum": gen(beam_width=2, early_stopping=99),
    "normalization unknown enum": gen(beam_width=2, normalization=99),
    "sid normalization, unconstrained": gen(beam_width=2, normalization=pb.NORMALIZATION_SID),
    "eos ids without custom_eos": gen(eos_token_ids=[1]),
    "eos id negative": gen(custom_eos=True, eos_token_ids=[-1]),
    "eos id huge": gen(custom_eos=True, eos_token_ids=[INT64_MAX]),
    "constrained, unknown catalog": gen(constrained=True, catalog="nope"),
    "constrained, too few tokens": gen(constrained=True, max_new_tokens=1),
    "prompt over the context": gen(input_ids=[5] * 5000),
}


def recommend(**fields: Any) -> pb.RecommendRequest:
    return pb.RecommendRequest(**{"history_item_ids": ["item-3"], "n": 2, **fields})


RECOMMEND_CASES: dict[str, pb.RecommendRequest] = {
    "n=0": recommend(n=0),
    "n<0": recommend(n=-5),
    "beam < n": recommend(n=4, beam_width=2),
    "beam huge": recommend(beam_width=INT32_MAX),
    "unknown item": recommend(history_item_ids=["no-such-item"]),
    "ids and sids": recommend(history_sids=[pb.Sid(codes=[1, 2, 3])]),
    "sid too short": recommend(history_item_ids=[], history_sids=[pb.Sid(codes=[1])]),
    "sid negative code": recommend(history_item_ids=[], history_sids=[pb.Sid(codes=[-1, 0, 0])]),
    "sid code over codebook": recommend(
        history_item_ids=[], history_sids=[pb.Sid(codes=[INT32_MAX, 0, 0])]
    ),
    "unknown catalog": recommend(catalog="nope"),
    "length_penalty nan": recommend(length_penalty=NAN),
    "normalization unknown enum": recommend(normalization=99),
}


def _code(call: Any, request: Any) -> grpc.StatusCode:
    started = time.perf_counter()
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=60)
    assert time.perf_counter() - started < 30, "a bad request must be refused quickly"
    return info.value.code()


@pytest.mark.parametrize("name", list(GENERATE_CASES))
def test_bad_generate_is_invalid_argument(stub: pb_grpc.DecoderStub, name: str) -> None:
    code = _code(stub.Generate, GENERATE_CASES[name])
    TALLY[f"Generate {code.name}"] += 1
    assert code == grpc.StatusCode.INVALID_ARGUMENT, name


@pytest.mark.parametrize("name", list(RECOMMEND_CASES))
def test_bad_recommend_is_invalid_argument(stub: pb_grpc.DecoderStub, name: str) -> None:
    code = _code(stub.Recommend, RECOMMEND_CASES[name])
    TALLY[f"Recommend {code.name}"] += 1
    assert code == grpc.StatusCode.INVALID_ARGUMENT, name


def test_message_size_limit(stub: pb_grpc.DecoderStub) -> None:
    # Just under the limit: parsed, then refused for its length; just over: refused unread.
    under = gen(input_ids=[7] * (MESSAGE_LIMIT // 2 - 64))
    assert under.ByteSize() < MESSAGE_LIMIT
    assert _code(stub.Generate, under) == grpc.StatusCode.INVALID_ARGUMENT
    over = gen(input_ids=[7] * MESSAGE_LIMIT)
    assert _code(stub.Generate, over) == grpc.StatusCode.RESOURCE_EXHAUSTED
    many = recommend(history_item_ids=["x" * 1000] * (MESSAGE_LIMIT // 1000 + 10))
    assert _code(stub.Recommend, many) == grpc.StatusCode.RESOURCE_EXHAUSTED
    TALLY["size limit"] += 3


GARBAGE = [
    b"\xff" * 16,
    b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # field 1 with an impossible length
    b"\x12\x05\x01\x02",  # truncated packed input_ids
    b"\x18" + b"\xff" * 11,  # varint longer than 10 bytes
    bytes(range(256)),
]


@pytest.mark.parametrize("payload", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_message_bytes(channel: grpc.Channel, payload: bytes) -> None:
    raw = channel.unary_unary(GENERATE, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as info:
        raw(payload, timeout=30)
    TALLY[f"garbage bytes {info.value.code().name}"] += 1
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()


@pytest.mark.parametrize(
    "junk",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x99\x00\x00\x00\x00\x00junk",
        bytes(range(256)) * 64,
    ],
    ids=["http1", "h2-bad-frame", "binary"],
)
def test_garbage_on_the_wire(server: BackgroundServer, junk: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(junk)
        sock.settimeout(10)
        try:
            while sock.recv(65536):  # the server answers (GOAWAY / error) and closes
                pass
        except (ConnectionResetError, TimeoutError):
            pass
    TALLY["raw wire junk"] += 1


def test_zz_still_serving_correctly(
    stub: pb_grpc.DecoderStub, baseline: pb.GenerateResponse
) -> None:
    """After every test above (module order): same answer as before, nothing leaked."""
    again = stub.Generate(VALID, timeout=60)
    assert list(again.beams) == list(baseline.beams)

    def idle() -> bool:  # the load snapshot is published after the step that answered
        load = stub.GetInfo(empty_pb2.Empty(), timeout=10).load
        return load.rows_in_use == load.running_requests == load.waiting_requests == 0

    wait_until(idle, 10, "the decoder to be idle (no rows or requests leaked)")
    print(f"\ngRPC bad input: {dict(TALLY)}")
