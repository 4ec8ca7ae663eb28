"""Admission by predicted wait over real gRPC: with `max_queue_wait_s=0` every request that
would queue behind another is refused at once, RESOURCE_EXHAUSTED with a `retry-after` from the
queue, and every request admitted is answered. Bounded by counts, not by speed: each request
needs all of the engine's rows, so at most one runs at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.decoder.server.servicer import RETRY_AFTER_KEY

ROWS = 16
BURST = 16


def _call(stub: pb_grpc.DecoderStub, request: object) -> object:
    method = stub.Recommend if isinstance(request, pb.RecommendRequest) else stub.Generate
    try:
        return method(request, timeout=120)  # generous: nothing here may time out
    except grpc.RpcError as exc:
        return exc


def test_a_burst_beyond_capacity_is_shed_at_once_with_retry_after(sid_model: SidModel) -> None:
    settings = make_settings(sid_model, max_rows=ROWS, max_queue_wait_s=0.0)
    generate = pb.GenerateRequest(input_ids=[5, 6, 7], beam_width=ROWS, n=2, max_new_tokens=8)
    items = [item for item, _ in sid_model.catalog[:3]]
    recommend = pb.RecommendRequest(history_item_ids=items, n=3, beam_width=ROWS)
    with BackgroundServer(settings) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        # Alone, nothing is ahead: admitted (and the engine's throughput gets measured).
        assert stub.Generate(generate, timeout=120).beams
        burst = [generate if i % 2 else recommend for i in range(BURST)]
        with ThreadPoolExecutor(BURST) as pool:
            results = list(pool.map(lambda r: _call(stub, r), burst))
    answered = [r for r in results if not isinstance(r, grpc.RpcError)]
    shed = [r for r in results if isinstance(r, grpc.RpcError)]
    assert answered and shed, results
    for response in answered:
        assert list(getattr(response, "beams", None) or response.items)  # type: ignore[union-attr]
    for error in shed:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert "predicted queue wait" in error.details()
        trailing = dict(error.trailing_metadata())
        assert int(trailing[RETRY_AFTER_KEY]) >= 1


def test_a_burst_that_fits_the_rows_is_taken_behind_long_work(sid_model: SidModel) -> None:
    """Requests that fit the free rows together with those queued ahead wait a step at most,
    however much work runs: none is shed against a bound far above a step (a generous 0.5 s)
    and below the long request's run (2,000 of its steps), which a drain of all the work
    ahead would predict as their wait."""
    settings = make_settings(sid_model, max_rows=ROWS, max_queue_wait_s=0.5)
    long = pb.GenerateRequest(
        input_ids=[5, 6, 7], beam_width=2, n=1, max_new_tokens=2000, ignore_eos=True
    )
    small = pb.GenerateRequest(input_ids=[1, 2], beam_width=2, n=1, max_new_tokens=4)
    burst = (ROWS - 2) // 2  # with the long request: every row
    with BackgroundServer(settings) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        assert stub.Generate(small, timeout=120).beams  # a step gets timed: predictions start
        with ThreadPoolExecutor(burst + 1) as pool:
            running = pool.submit(_call, stub, long)
            results = list(pool.map(lambda _: _call(stub, small), range(burst)))
            assert not isinstance(running.result(), grpc.RpcError)
    shed = [r for r in results if isinstance(r, grpc.RpcError)]
    assert not shed, [(r.code(), r.details()) for r in shed]
    assert all(r.beams for r in results)  # type: ignore[union-attr]


def test_without_a_bound_or_deadline_nothing_is_shed(sid_model: SidModel) -> None:
    settings = make_settings(sid_model, max_rows=ROWS)
    generate = pb.GenerateRequest(input_ids=[5, 6, 7], beam_width=ROWS, n=2, max_new_tokens=4)
    with BackgroundServer(settings) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        assert stub.Generate(generate, timeout=120).beams
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda _: stub.Generate(generate), range(8)))
    assert all(r.beams for r in results)


def test_a_refused_request_leaves_no_work_behind_for_the_prediction(sid_model: SidModel) -> None:
    # A request too long for the model is refused on the engine thread; its rows x steps (2e9
    # tokens) must leave the predicted queue before its caller hears of the refusal, or the
    # caller's next request is shed behind work that will never run. A long request keeps the
    # engine stepping, so the engine thread is mid-step when each refusal comes back.
    settings = make_settings(sid_model, max_rows=ROWS)
    long = pb.GenerateRequest(
        input_ids=[5, 6, 7], beam_width=2, n=1, max_new_tokens=400, ignore_eos=True
    )
    bad = pb.GenerateRequest(input_ids=[1, 2, 3], max_new_tokens=2_000_000_000)
    good = pb.GenerateRequest(input_ids=[1], max_new_tokens=2)
    with BackgroundServer(settings) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        assert stub.Generate(good, timeout=120).beams  # a step gets timed: predictions start
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(_call, stub, long)
            outcomes = []
            for _ in range(20):
                refused = _call(stub, bad)
                assert isinstance(refused, grpc.RpcError), refused
                assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused
                outcomes.append(_call(stub, good))
            assert not isinstance(running.result(), grpc.RpcError)
    shed = [o for o in outcomes if isinstance(o, grpc.RpcError)]
    assert not shed, [(o.code(), o.details()) for o in shed]
