"""Waiting until a child service answers (Redis PING, HTTP 200, decoder GetInfo)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx

from widebeam.launcher.children import Child


class StartupError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    check: Callable[[], bool], children: list[Child], what: str, timeout_s: float
) -> None:
    """Poll `check` until it is true; fail fast if any child dies meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children:
            if child.exit_code is not None:
                raise StartupError(
                    f"{child.name} exited with code {child.exit_code} during startup"
                )
        try:
            if check():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.25)
    raise StartupError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        return httpx.get(url, timeout=2.0).status_code == 200

    return check


def redis_ping(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    return check
