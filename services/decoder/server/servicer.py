"""grpc.aio servicer for `widebeam.decoder.v1.Decoder`: protobuf in, engine work, protobuf out.

Status codes: malformed or impossible requests, and requests above this decoder's limits
(`request_limits.py`) -> INVALID_ARGUMENT with a message naming the field;
queue full, or a predicted finish past the request's deadline (beside other work) or a
predicted wait past the decoder's `max_queue_wait_s` -> RESOURCE_EXHAUSTED at once, with the
queue's `retry-after` (seconds) in the trailing metadata when the engine's throughput is
measured; loading or stopping -> UNAVAILABLE; deadline -> the request is aborted in the engine
(rows freed) and the call ends DEADLINE_EXCEEDED; engine failure -> INTERNAL for the affected
requests only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf import empty_pb2

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.server.async_types import EngineFailure, Overloaded, ShuttingDown
from widebeam.services.decoder.server.convert import generate_response, generation_request
from widebeam.services.decoder.server.engine_handle import EngineHandle
from widebeam.services.decoder.server.recommend import (
    RecommendSpec,
    parse_recommend,
    recommend_response,
)
from widebeam.services.decoder.server.request_limits import RequestLimits

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_AFTER_KEY = "retry-after"  # trailing metadata of a shed call: seconds, an integer


class DecoderServicer(pb_grpc.DecoderServicer):
    def __init__(self) -> None:
        self._engine: EngineHandle | None = None

    def attach(self, engine: EngineHandle) -> None:
        """Called once the engine is ready; until then every RPC answers UNAVAILABLE."""
        self._engine = engine

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResponse:
        engine = await self._ready(context)
        limits = engine.limits
        spec = await _parsed(context, lambda: _limited_generate(request, limits))
        out = await _run(context, engine.generate(spec, context.time_remaining()))
        return generate_response(request.request_id, spec.catalog, out)

    async def Recommend(
        self, request: pb.RecommendRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecommendResponse:
        engine = await self._ready(context)
        limits = engine.limits
        spec = await _parsed(context, lambda: _limited_recommend(request, limits))
        answer = await _run(context, engine.recommend(spec, context.time_remaining()))
        return recommend_response(answer, request.request_id)

    async def GetInfo(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> pb.GetInfoResponse:
        engine = await self._ready(context)
        return await _run(context, engine.info())

    async def _ready(self, context: grpc.aio.ServicerContext) -> EngineHandle:
        if self._engine is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "the decoder is still loading its model"
            )
        assert self._engine is not None
        return self._engine


def _limited_generate(msg: pb.GenerateRequest, limits: RequestLimits) -> GenerationRequest:
    limits.check_generate(msg)
    spec = generation_request(msg)
    limits.check_beam(spec.beam_width, spec.n)
    return spec


def _limited_recommend(msg: pb.RecommendRequest, limits: RequestLimits) -> RecommendSpec:
    limits.check_recommend(msg)
    spec = parse_recommend(msg)
    limits.check_beam(spec.beam_width, spec.n)
    return spec


async def _parsed(context: grpc.aio.ServicerContext, parse: Callable[[], T]) -> T:
    try:
        return parse()
    except RequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise  # unreachable: abort raises


async def _run(context: grpc.aio.ServicerContext, call: Awaitable[T]) -> T:
    failure: tuple[grpc.StatusCode, str] | None = None
    trailing: tuple[tuple[str, str], ...] = ()
    try:
        return await call
    except RequestError as exc:
        failure = grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    except Overloaded as exc:
        failure = grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
        if exc.retry_after_s is not None:
            trailing = ((RETRY_AFTER_KEY, str(exc.retry_after_s)),)
    except ShuttingDown as exc:
        failure = grpc.StatusCode.UNAVAILABLE, str(exc)
    except TimeoutError:
        failure = grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded; the request was aborted"
    except EngineFailure as exc:
        failure = grpc.StatusCode.INTERNAL, str(exc)
    except Exception as exc:
        log.exception("unexpected error")
        failure = grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
    await context.abort(*failure, trailing_metadata=trailing)
    raise AssertionError("unreachable: context.abort raises")
