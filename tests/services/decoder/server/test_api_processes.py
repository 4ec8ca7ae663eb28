"""`api_processes`: the gRPC port served by API processes over a socket to the engine's process.

Every answer equals the one the engine's own process gives (same model, same catalog); errors
keep their codes and messages; a deadline frees the rows; an API process that dies is started
again while the other one serves.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import load, make_settings, wait_until
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

HISTORY = ["item-3", "item-17", "item-42"]


@pytest.fixture(scope="module")
def decoder_overrides() -> dict[str, Any]:
    return {"api_processes": 2}


@pytest.fixture(scope="module")
def local_stub(sid_model: SidModel) -> Iterator[pb_grpc.DecoderStub]:
    """The same decoder with the port in the engine's process: the reference answers."""
    with (
        BackgroundServer(make_settings(sid_model)) as srv,
        grpc.insecure_channel(srv.address) as channel,
    ):
        yield pb_grpc.DecoderStub(channel)


def both(stub: pb_grpc.DecoderStub, local: pb_grpc.DecoderStub, rpc: str, request: Any) -> Any:
    remote_answer = getattr(stub, rpc)(request, timeout=60)
    assert remote_answer == getattr(local, rpc)(request, timeout=60)
    return remote_answer


def code_and_details(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_generate_equals_the_engine_process_answer(
    stub: pb_grpc.DecoderStub, local_stub: pb_grpc.DecoderStub
) -> None:
    constrained = pb.GenerateRequest(
        request_id="c", input_ids=[3, 5, 7], beam_width=8, n=8, max_new_tokens=5, constrained=True
    )
    answer = both(stub, local_stub, "Generate", constrained)
    assert len(answer.beams) == 8 and all(b.item_ids for b in answer.beams)
    assert answer.catalog.version.startswith("file-")
    free = pb.GenerateRequest(
        request_id="f", input_ids=[3, 5, 7, 9], beam_width=6, n=3, max_new_tokens=5,
        return_logprobs=True,
    )  # fmt: skip
    answer = both(stub, local_stub, "Generate", free)
    assert len(answer.beams) == 3
    assert all(len(b.logprobs) == len(b.output_ids) for b in answer.beams)


def test_recommend_equals_the_engine_process_answer(
    stub: pb_grpc.DecoderStub, local_stub: pb_grpc.DecoderStub
) -> None:
    request = pb.RecommendRequest(history_item_ids=HISTORY, n=10, beam_width=16)
    answer = both(stub, local_stub, "Recommend", request)
    assert len({i.item_id for i in answer.items}) == 10
    skipping = pb.RecommendRequest(
        history_item_ids=[*HISTORY, "no-such-item"], n=4, skip_unknown_items=True,
        exclude_item_ids=[answer.items[0].item_id],
    )  # fmt: skip
    answer = both(stub, local_stub, "Recommend", skipping)
    assert list(answer.skipped_history_item_ids) == ["no-such-item"]


def _idle(now: pb.Load) -> bool:
    return now.rows_in_use == now.running_requests == now.waiting_requests == 0


def test_get_info_equals_the_engine_process_answer(
    stub: pb_grpc.DecoderStub, local_stub: pb_grpc.DecoderStub
) -> None:
    # GetInfo carries the live load: both calls must see the engine idle (an earlier test's
    # request may still be finishing on a busy machine).
    wait_until(lambda: _idle(load(local_stub)), 60, "an idle engine")
    info = both(stub, local_stub, "GetInfo", empty_pb2.Empty())
    assert info.catalogs[0].name == "default" and info.limits.max_rows == 64


def test_errors_keep_their_codes_and_messages(
    stub: pb_grpc.DecoderStub, local_stub: pb_grpc.DecoderStub
) -> None:
    requests = [
        # refused in the API process (parsing, limits)
        ("Recommend", pb.RecommendRequest(history_item_ids=HISTORY, n=9, beam_width=4)),
        ("Generate", pb.GenerateRequest(input_ids=[3], beam_width=65, n=1)),
        # refused in the engine's process (catalog, history, engine validation)
        ("Recommend", pb.RecommendRequest(history_item_ids=HISTORY, catalog="nope")),
        ("Recommend", pb.RecommendRequest(history_item_ids=["no-such-item"])),
        ("Generate", pb.GenerateRequest(input_ids=[999_999], beam_width=2, n=1)),
    ]
    for rpc, request in requests:
        remote = code_and_details(lambda r=request, m=rpc: getattr(stub, m)(r, timeout=30))
        local = code_and_details(lambda r=request, m=rpc: getattr(local_stub, m)(r, timeout=30))
        assert remote == local and remote[0] == grpc.StatusCode.INVALID_ARGUMENT, (rpc, remote)


LONG = pb.GenerateRequest(
    input_ids=[1, 2, 3], beam_width=32, n=1, max_new_tokens=400, custom_eos=True
)


def test_a_deadline_aborts_the_request_and_frees_its_rows(stub: pb_grpc.DecoderStub) -> None:
    code, _ = code_and_details(lambda: stub.Generate(LONG, timeout=0.5))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: load(stub).rows_in_use == 0, 30, "the aborted request's rows freed")


def test_a_cancelled_call_frees_its_rows(stub: pb_grpc.DecoderStub) -> None:
    call = stub.Generate.future(LONG)
    wait_until(lambda: load(stub).rows_in_use == 32, 30, "the long request to be admitted")
    assert call.cancel()
    wait_until(lambda: load(stub).rows_in_use == 0, 30, "the cancelled request's rows freed")
    assert load(stub).running_requests == 0


def test_health_is_serving(server: BackgroundServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
        checks = health_pb2_grpc.HealthStub(channel)
        status = checks.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_a_dead_api_process_is_replaced_while_the_other_serves(
    server: BackgroundServer, stub: pb_grpc.DecoderStub
) -> None:
    api = server.server.api
    assert api is not None and len(api.pids) == 2
    victim = api.pids[0]
    os.kill(victim, signal.SIGKILL)
    request = pb.RecommendRequest(history_item_ids=HISTORY, n=3)
    answered = 0
    deadline = time.monotonic() + 60
    while answered < 10 and time.monotonic() < deadline:
        with grpc.insecure_channel(server.address) as channel:  # a new connection each time
            try:
                pb_grpc.DecoderStub(channel).Recommend(request, timeout=30)
                answered += 1
            except grpc.RpcError as exc:
                # only a connection that landed on the dying process, before the kernel drops it
                assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
    assert answered == 10
    wait_until(lambda: victim not in api.pids and len(api.pids) == 2, 60, "a new API process")
    wait_until(lambda: server.server.engine_port.connections == 2, 60, "it connects")


def test_an_api_process_loads_no_engine_code() -> None:
    # What a spawned API process imports: its module's closure. torch would cost each process
    # seconds of start-up and hundreds of MB.
    code = (
        "import sys, widebeam.services.decoder.server.api_processes as m; "
        "print(sorted(n for n in ('torch', 'triton', 'transformers') if n in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_port_in_use_is_refused_at_start(sid_model: SidModel) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = BackgroundServer(make_settings(sid_model, port=port, api_processes=1))
        with pytest.raises(ValueError, match=f"cannot listen on 127.0.0.1:{port}"):
            server.start()
        server.stop()
