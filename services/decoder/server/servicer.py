"""grpc.aio servicer for `widebeam.decoder.v1.Decoder`: protobuf in, engine work, protobuf out.

Status codes: malformed or impossible requests, and requests above this decoder's limits
(`request_limits.py`) -> INVALID_ARGUMENT with a message naming the field;
queue full, or a predicted wait past the request's deadline or the decoder's
`max_queue_wait_s` -> RESOURCE_EXHAUSTED at once, with the queue's `retry-after` (seconds) in
the trailing metadata when the engine's throughput is measured; loading or stopping ->
UNAVAILABLE; deadline -> the request is aborted in the engine (rows freed) and the call ends
DEADLINE_EXCEEDED; engine failure -> INTERNAL for the affected requests only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf import empty_pb2

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.async_types import (
    EngineFailure,
    Overloaded,
    Prepare,
    RequestWork,
    ShuttingDown,
)
from widebeam.services.decoder.server.convert import (
    catalog_info,
    generate_response,
    generation_request,
    layout_info,
)
from widebeam.services.decoder.server.recommend import (
    RecommendCall,
    RecommendSpec,
    parse_recommend,
    recommend_response,
    recommend_work,
)
from widebeam.services.decoder.server.request_limits import RequestLimits

log = logging.getLogger(__name__)
T = TypeVar("T")

RETRY_AFTER_KEY = "retry-after"  # trailing metadata of a shed call: seconds, an integer


@dataclass(frozen=True)
class ServerInfo:
    """What GetInfo reports besides the live engine state."""

    model_path: str
    model_type: str
    sid_layout: SidLayout | None
    device: str
    dtype: str
    max_message_bytes: int
    limits: RequestLimits


class DecoderServicer(pb_grpc.DecoderServicer):
    def __init__(self) -> None:
        self._engine: AsyncEngine | None = None
        self._info: ServerInfo | None = None

    def attach(self, engine: AsyncEngine, info: ServerInfo) -> None:
        """Called once the model is loaded; until then every RPC answers UNAVAILABLE."""
        self._engine, self._info = engine, info

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResponse:
        engine = await self._ready(context)
        limits = self._limits()
        spec = await _parsed(context, lambda: _limited_generate(request, limits))
        out = await _run(engine, spec, context)
        return generate_response(request.request_id, spec.catalog, out)

    async def Recommend(
        self, request: pb.RecommendRequest, context: grpc.aio.ServicerContext
    ) -> pb.RecommendResponse:
        engine = await self._ready(context)
        limits = self._limits()
        spec = await _parsed(context, lambda: _limited_recommend(request, limits))
        call = RecommendCall(spec, limits)
        out = await _run(engine, call, context, recommend_work(spec, engine.catalogs()))
        return recommend_response(call, request.request_id, out)

    async def GetInfo(
        self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext
    ) -> pb.GetInfoResponse:
        engine = await self._ready(context)
        assert self._info is not None
        info, core, load = self._info, engine.engine, engine.load()
        limits, allowed = core.limits, info.limits
        response = pb.GetInfoResponse(
            model_name=Path(info.model_path).name,
            model_path=info.model_path,
            model_type=info.model_type,
            vocab_size=limits.vocab_size,
            limits=pb.Limits(
                max_rows=limits.max_rows,
                max_beam_width=allowed.max_beam_width,
                max_model_len=limits.max_model_len,
                max_kv_slots=limits.max_kv_slots,
                max_waiting=engine.max_waiting,
                max_message_bytes=info.max_message_bytes,
                max_n=allowed.max_n,
                max_prompt_tokens=allowed.max_prompt_tokens,
                max_history_items=allowed.max_history_items,
                max_exclude_ids=allowed.max_exclude_ids,
                max_eos_token_ids=allowed.max_eos_token_ids,
            ),
            catalogs=[catalog_info(c) for _, c in sorted(engine.catalogs().items())],
            default_eos_token_ids=limits.default_eos_ids,
            device=info.device,
            dtype=info.dtype,
            load=pb.Load(
                rows_in_use=load.rows_in_use,
                running_requests=load.running,
                waiting_requests=load.waiting,
                kv_slots_free=load.kv_slots_free,
            ),
        )
        if info.sid_layout is not None:
            response.sid_layout.CopyFrom(layout_info(info.sid_layout))
        return response

    async def _ready(self, context: grpc.aio.ServicerContext) -> AsyncEngine:
        if self._engine is None:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, "the decoder is still loading its model"
            )
        assert self._engine is not None
        return self._engine

    def _limits(self) -> RequestLimits:
        assert self._info is not None  # attached with the engine
        return self._info.limits


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


async def _run(
    engine: AsyncEngine,
    request: GenerationRequest | Prepare,
    context: grpc.aio.ServicerContext,
    work: RequestWork | None = None,
) -> RequestOutput:
    failure: tuple[grpc.StatusCode, str] | None = None
    trailing: tuple[tuple[str, str], ...] = ()
    try:
        return await engine.generate(request, timeout=context.time_remaining(), work=work)
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
