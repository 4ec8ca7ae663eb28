"""An API process' `EngineHandle`: the engine's process, over its Unix socket.

`run` keeps the connection: it connects (again and again while the engine's process starts or
restarts), reports each change to `on_change`, and reads replies. While not connected every
call raises ShuttingDown (the servicer answers UNAVAILABLE); calls in flight when the
connection ends raise it too. A call whose caller stops waiting (deadline, cancellation) sends
an abort, so the engine frees its rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_types import ShuttingDown
from widebeam.services.decoder.server.engine_handle import ServerInfo
from widebeam.services.decoder.server.engine_wire import (
    Kind,
    decode_error,
    decode_output,
    frame,
    generate_body,
    hello_from,
    read_message,
    recommend_body,
    recommended_from,
)
from widebeam.services.decoder.server.recommend import RecommendAnswer, RecommendSpec
from widebeam.services.decoder.server.request_limits import RequestLimits

log = logging.getLogger(__name__)

RECONNECT_DELAY_S = 0.2
NOT_CONNECTED = "the decoder's engine is not reachable (starting, restarting or stopping)"


class RemoteEngine:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.server_info: ServerInfo | None = None  # from the engine's hello
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[tuple[Kind, Any]]] = {}
        self._ids = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None

    @property
    def limits(self) -> RequestLimits:
        assert self.server_info is not None  # attached to the servicer after the hello
        return self.server_info.limits

    async def run(self, on_change: Callable[[bool], Awaitable[None]]) -> None:
        """Connect, serve replies, reconnect; until cancelled."""
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(str(self.path))
                kind, _, info = await read_message(reader)
            except (OSError, asyncio.IncompleteReadError):
                await asyncio.sleep(RECONNECT_DELAY_S)
                continue
            if kind is not Kind.HELLO:
                raise RuntimeError(f"the engine's process began with {kind.value}, not hello")
            self.server_info, self._writer = hello_from(info), writer
            log.info("connected to the engine's process")
            await on_change(True)
            try:
                await self._read_replies(reader)
            finally:
                self._writer = None
                writer.close()
                self._fail_pending(ShuttingDown("the decoder's engine went away mid-request"))
            log.warning("the engine's process closed the connection; reconnecting")
            await on_change(False)

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                kind, call_id, body = await read_message(reader)
                future = self._pending.pop(call_id, None)
                if future is not None and not future.done():
                    future.set_result((kind, body))

    def _fail_pending(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    async def _call(self, kind: Kind, body: Any) -> tuple[Kind, Any]:
        writer = self._writer
        if writer is None:
            raise ShuttingDown(NOT_CONNECTED)
        call_id = next(self._ids)
        future: asyncio.Future[tuple[Kind, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        writer.write(frame(kind, call_id, body))
        try:
            reply_kind, reply = await future
        finally:
            waited_out = not future.done() and self._pending.pop(call_id, None) is not None
            if waited_out and self._writer is writer and not writer.is_closing():
                writer.write(frame(Kind.ABORT, call_id, None))
        if reply_kind is Kind.ERROR:
            raise decode_error(reply)
        return reply_kind, reply

    async def generate(self, request: GenerationRequest, timeout: float | None) -> RequestOutput:
        _, encoded = await self._call(Kind.GENERATE, generate_body(request, timeout))
        return decode_output(encoded)

    async def recommend(self, spec: RecommendSpec, timeout: float | None) -> RecommendAnswer:
        _, body = await self._call(Kind.RECOMMEND, recommend_body(spec, timeout))
        return recommended_from(spec, body)

    async def info(self) -> pb.GetInfoResponse:
        _, data = await self._call(Kind.INFO, None)
        return pb.GetInfoResponse.FromString(data)
