"""Run a `DecoderServer` on a background thread with its own event loop (tests, embedding)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from widebeam.services.decoder.server.app import DecoderServer
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.started_in_with import StartedInWith

T = TypeVar("T")


class BackgroundServer(StartedInWith):
    """`with BackgroundServer(settings) as srv:` serves on `srv.address` until the block ends."""

    def __init__(self, settings: DecoderSettings, start_timeout: float = 120.0) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = DecoderServer(settings)
        self.start_timeout = start_timeout
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="decoder-aio", daemon=True
        )
        self.port = 0

    @property
    def address(self) -> str:
        return f"{self.server.settings.host}:{self.port}"

    def start(self) -> BackgroundServer:
        self._thread.start()
        self.port = self._call(self.server.start(), self.start_timeout)
        return self

    def stop(self, grace: float = 1.0) -> None:
        try:
            self._call(self.server.stop(grace), grace + 30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)
