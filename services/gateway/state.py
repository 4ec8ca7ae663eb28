"""What the routes of one gateway app share: settings, decoder pool, metrics, tokenizer, and
answers derived from the decoders' GetInfo (model name, limits, catalogs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.decoder_info import beam_cap, find_catalog, reported_model_name
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.metrics import GatewayMetrics
from widebeam.services.gateway.recommender import Recommender
from widebeam.services.gateway.served_models import ServedModels
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.gateway.text_codec import TextCodec
from widebeam.services.http.errors import ApiError


@dataclass
class GatewayState:
    settings: GatewaySettings
    pool: DecoderPool
    metrics: GatewayMetrics
    recommender: Recommender = field(init=False)
    served_models: ServedModels = field(init=False)
    _codec: TextCodec | None = None
    _codec_settled: bool = False
    _codec_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        settings = self.settings
        self.served_models = ServedModels.from_settings(settings)
        self.recommender = Recommender(
            self.pool, self.info_of, settings.max_beam_width, settings.model_name, self.metrics
        )

    async def info_of(self, fresh: bool) -> pb.GetInfoResponse | None:
        """The latest polled GetInfo, or (`fresh`) one asked now."""
        return await self.pool.info() if fresh else self.pool.latest_info()

    # ----- model ---------------------------------------------------------------------------
    async def refresh_info(self, timeout: float = 2.0) -> None:
        """One GetInfo now when no decoder has answered a poll yet (e.g. the gateway started
        before its decoders), so what is reported is the decoders' answer, not a placeholder."""
        if self.pool.latest_info() is None:
            with contextlib.suppress(ApiError):
                await self.pool.info(timeout=timeout)

    def model_name(self) -> str:
        return reported_model_name(self.settings.model_name, self.pool.latest_info())

    def check_model(self, name: str | None) -> str:
        """The name to report for a request's `model` (the served model's when None); unknown
        names are refused (404), as OpenAI does, so a typo is not silently served."""
        return self.served_models.resolve(name, self.pool.latest_info())

    def model_names(self) -> list[str]:
        """Every name the served model answers to, its own first (see `served_models`)."""
        return self.served_models.names(self.pool.latest_info())

    async def codec(self) -> TextCodec | None:
        """The tokenizer, loaded once; None when neither the settings nor the decoder name a
        directory readable here (then retried while the decoder has not answered yet)."""
        if self._codec_settled:
            return self._codec
        async with self._codec_lock:
            if self._codec_settled:
                return self._codec
            directory = self.settings.model_dir
            if directory is None:
                info = self.pool.latest_info() or await self.pool.info(timeout=5.0)
                directory = info.model_path if os.path.isdir(info.model_path) else None
            if directory is not None:
                self._codec = await asyncio.to_thread(TextCodec.load, directory)
            self._codec_settled = True
            return self._codec

    # ----- limits and catalogs -------------------------------------------------------------
    def beam_cap(self) -> tuple[int, str]:
        """The widest beam allowed and who sets it (the gateway's limit or the decoders')."""
        return beam_cap(self.pool.latest_info(), self.settings.max_beam_width)

    async def require_catalog(self, name: str) -> pb.CatalogInfo:
        """The catalog's info; 404 when no decoder serves it (after one fresh GetInfo, so a
        catalog published since the last poll is found)."""
        return await find_catalog(self.info_of, name)


async def get_state(request: Request) -> GatewayState:
    """A coroutine, so FastAPI does not run it on its threadpool (see `http.api_keys`)."""
    state: GatewayState = request.app.state.gateway
    return state


# Route parameter type: `state: State` injects the app's GatewayState.
State = Annotated[GatewayState, Depends(get_state)]
