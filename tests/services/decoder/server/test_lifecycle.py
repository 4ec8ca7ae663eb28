"""Deadlines, cancellation and overload free the engine's rows; health and reflection work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.services.decoder.server.conftest import load, wait_until
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc

ROWS = 8
# Takes ~seconds on CPU and holds all rows: a request the tests cancel midway.
LONG = pb.GenerateRequest(
    input_ids=[1, 2, 3], beam_width=ROWS, n=1, max_new_tokens=400, custom_eos=True
)


@pytest.fixture(scope="module")
def decoder_overrides() -> dict[str, Any]:
    return {"max_rows": ROWS, "max_waiting": 2}


@pytest.fixture
def stub(channel: grpc.Channel) -> Iterator[pb_grpc.DecoderStub]:
    stub = pb_grpc.DecoderStub(channel)
    yield stub
    wait_until(lambda: load(stub).rows_in_use == 0, what="rows to be freed after the test")


def test_deadline_frees_rows(stub: pb_grpc.DecoderStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(LONG, timeout=0.5)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: load(stub).rows_in_use == 0, 2.0, "rows to be freed")
    assert load(stub).running_requests == load(stub).waiting_requests == 0


def test_client_cancel_frees_rows(stub: pb_grpc.DecoderStub) -> None:
    call = stub.Generate.future(LONG)
    wait_until(lambda: load(stub).rows_in_use == ROWS, what="the long request to be admitted")
    free_while_running = load(stub).kv_slots_free
    assert call.cancel()
    wait_until(lambda: load(stub).rows_in_use == 0, 2.0, "rows to be freed")
    assert load(stub).kv_slots_free > free_while_running
    assert load(stub).running_requests == 0


def test_overload_is_resource_exhausted_at_once(stub: pb_grpc.DecoderStub) -> None:
    running = stub.Generate.future(LONG)
    wait_until(lambda: load(stub).rows_in_use == ROWS, what="the first request to run")
    queued = [stub.Generate.future(LONG) for _ in range(2)]  # max_waiting = 2
    wait_until(lambda: load(stub).waiting_requests == 2, what="two requests to queue")
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(LONG, timeout=2.0)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "limit 2" in info.value.details()
    for call in [running, *queued]:
        call.cancel()
    wait_until(lambda: load(stub).waiting_requests == 0 and load(stub).rows_in_use == 0)
    # Capacity is back: a normal request runs.
    assert len(stub.Generate(pb.GenerateRequest(input_ids=[4]), timeout=30).beams) == 1


def test_health_is_serving(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "widebeam.decoder.v1.Decoder"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_services(channel: grpc.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    reply = next(iter(reflection.ServerReflectionInfo(iter([request]), timeout=5)))
    names = {s.name for s in reply.list_services_response.service}
    assert {"widebeam.decoder.v1.Decoder", "grpc.health.v1.Health"} <= names


def test_get_info_reports_limits_and_catalog(stub: pb_grpc.DecoderStub) -> None:
    from google.protobuf import empty_pb2

    info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
    assert info.limits.max_rows == info.limits.max_beam_width == ROWS
    assert info.limits.max_waiting == 2
    assert info.sid_layout.spec and len(info.sid_layout.levels) == 3
    assert [c.name for c in info.catalogs] == ["default"]
    assert info.catalogs[0].num_items == 300 and info.catalogs[0].version.startswith("file-")
