"""What the gRPC servicer asks of the engine, wherever the engine runs.

`LocalEngine` (`local_engine.py`) drives an `AsyncEngine` in the servicer's own process.
`RemoteEngine` (`remote_engine.py`) sends the same calls to the engine's process from an API
process, and the engine's process answers them through a `LocalEngine` (`engine_port.py`). Both
raise the same errors: RequestError, Overloaded, ShuttingDown, EngineFailure, TimeoutError.
This module imports no engine code: API processes load neither torch nor the model code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.recommend import RecommendAnswer, RecommendSpec
from widebeam.services.decoder.server.request_limits import RequestLimits


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


class EngineHandle(Protocol):
    @property
    def limits(self) -> RequestLimits: ...

    async def generate(self, request: GenerationRequest, timeout: float | None) -> RequestOutput:
        """A Generate call's output."""
        ...

    async def recommend(self, spec: RecommendSpec, timeout: float | None) -> RecommendAnswer:
        """A Recommend call's output, with the catalog version its history was resolved in."""
        ...

    async def info(self) -> pb.GetInfoResponse: ...
