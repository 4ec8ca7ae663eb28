"""`LocalEngine`: the `EngineHandle` over the `AsyncEngine` of this process (the engine's
process: its own gRPC port, or the API processes' socket), and the GetInfo answer it builds."""

from __future__ import annotations

from pathlib import Path

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.convert import catalog_info, layout_info
from widebeam.services.decoder.server.engine_handle import ServerInfo
from widebeam.services.decoder.server.recommend import (
    RecommendAnswer,
    RecommendCall,
    RecommendSpec,
    recommend_work,
)
from widebeam.services.decoder.server.request_limits import RequestLimits


class LocalEngine:
    """An `EngineHandle` over the `AsyncEngine` of this process."""

    def __init__(self, engine: AsyncEngine, info: ServerInfo) -> None:
        self.engine, self.server_info = engine, info

    @property
    def limits(self) -> RequestLimits:
        return self.server_info.limits

    async def generate(self, request: GenerationRequest, timeout: float | None) -> RequestOutput:
        return await self.engine.generate(request, timeout=timeout)

    async def recommend(self, spec: RecommendSpec, timeout: float | None) -> RecommendAnswer:
        call = RecommendCall(spec, self.limits)
        catalogs = self.engine.catalogs()
        call.prepare_ahead(catalogs)  # here, off the engine thread
        work = recommend_work(spec, catalogs)
        out = await self.engine.generate(call, timeout=timeout, work=work)
        return call.answer(out)

    async def info(self) -> pb.GetInfoResponse:
        return info_response(self.engine, self.server_info)


def info_response(engine: AsyncEngine, info: ServerInfo) -> pb.GetInfoResponse:
    core, load = engine.engine, engine.load()
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
