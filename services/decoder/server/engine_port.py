"""The engine's process side of the API processes' socket: each message becomes a call of the
process's `LocalEngine`, each answer a message back.

One connection per API process. A connection that ends (its process stopped or died) aborts
every request it still had running, so their rows are freed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from widebeam.services.decoder.server.engine_wire import (
    Kind,
    encode_error,
    encode_output,
    frame,
    generate_from,
    hello_body,
    read_message,
    recommend_from,
    recommended_body,
)
from widebeam.services.decoder.server.local_engine import LocalEngine

log = logging.getLogger(__name__)


class EnginePort:
    def __init__(self, engine: LocalEngine, path: Path) -> None:
        self.engine, self.path = engine, path
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self._changed = asyncio.Event()

    async def start(self) -> EnginePort:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        os.chmod(self.path, 0o600)
        return self

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def wait_for_connections(self, count: int, timeout: float) -> bool:
        """True once `count` API processes are connected; False after `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.connections < count:
                    self._changed.clear()
                    await self._changed.wait()
        return self.connections >= count

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        calls: dict[int, asyncio.Task[None]] = {}
        writer.write(frame(Kind.HELLO, 0, hello_body(self.engine.server_info)))
        self._connections.add(writer)
        self._changed.set()
        try:
            while True:
                kind, call_id, body = await read_message(reader)
                if kind is Kind.ABORT:
                    task = calls.pop(call_id, None)
                    if task is not None:
                        task.cancel()
                    continue
                task = asyncio.create_task(self._answer(kind, call_id, body, writer))
                calls[call_id] = task
                task.add_done_callback(lambda _t, cid=call_id: calls.pop(cid, None))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the API process closed its end
        except Exception:
            log.exception("an API process' connection failed; closing it")
        finally:
            self._connections.discard(writer)
            self._changed.set()
            for task in list(calls.values()):
                task.cancel()  # its request is aborted in the engine, its rows freed
            writer.close()

    async def _answer(
        self, kind: Kind, call_id: int, body: Any, writer: asyncio.StreamWriter
    ) -> None:
        try:
            reply = await self._reply(kind, call_id, body)
        except asyncio.CancelledError:
            return  # aborted: the API process no longer waits for it
        except Exception as exc:
            reply = frame(Kind.ERROR, call_id, encode_error(exc))
        if writer.is_closing():
            return
        writer.write(reply)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _reply(self, kind: Kind, call_id: int, body: Any) -> bytes:
        if kind is Kind.GENERATE:
            request, timeout = generate_from(body)
            out = await self.engine.generate(request, timeout)
            return frame(Kind.OUTPUT, call_id, encode_output(out))
        if kind is Kind.RECOMMEND:
            spec, timeout = recommend_from(body)
            answer = await self.engine.recommend(spec, timeout)
            return frame(Kind.RECOMMENDED, call_id, recommended_body(answer))
        if kind is Kind.INFO:
            info = await self.engine.info()
            return frame(Kind.INFO_REPLY, call_id, info.SerializeToString())
        raise ValueError(f"the engine's process does not take {kind.value} messages")
