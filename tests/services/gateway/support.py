"""A real gateway over HTTP: uvicorn on a free port, on a thread, with `create_app(settings)`."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from widebeam.services.gateway.app import create_app
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.started_in_with import StartedInWith


def bearer(key: str) -> dict[str, str]:
    """The Authorization header that presents `key`."""
    return {"Authorization": f"Bearer {key}"}


class GatewayServer(StartedInWith):
    """`with GatewayServer(settings) as gw:` serves on `gw.url` until the block ends."""

    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        config = uvicorn.Config(
            self.app, loop="asyncio", log_level="warning", access_log=False, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> GatewayServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(15)
        self._sock.close()


def gateway_settings(decoders: list[str], **overrides: Any) -> GatewaySettings:
    fields: dict[str, Any] = {
        "decoders": decoders,
        "host": "127.0.0.1",
        "port": 0,
        "request_timeout_s": 30.0,
        "info_poll_interval_s": 0.2,
        "retry_budget_s": 5.0,
    }
    return GatewaySettings(**(fields | overrides))
