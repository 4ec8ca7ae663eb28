"""Waiting until a child service answers (Redis PING, HTTP 200, a line in its log), giving up
at once when a child dies or the launcher is told to stop."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable

import httpx
import redis

from widebeam.launcher.children import Child


class StartupError(RuntimeError):
    pass


class StartupInterrupted(StartupError):
    """SIGINT/SIGTERM arrived while the stack was starting."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(
    check: Callable[[], bool],
    children: list[Child],
    what: str,
    timeout_s: float,
    stop: threading.Event | None = None,
) -> None:
    """Poll `check` until it is true; fail fast if any child dies or `stop` is set meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            raise StartupInterrupted(f"stopped while waiting for {what}")
        for child in children:
            if child.exit_code is not None:
                raise StartupError(
                    f"{child.name} exited with code {child.exit_code} during startup"
                )
        try:
            if check():
                return
        except (OSError, httpx.HTTPError, redis.RedisError):
            pass
        time.sleep(0.25)
    raise StartupError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        return httpx.get(url, timeout=2.0).status_code == 200

    return check


def redis_ping(url: str) -> Callable[[], bool]:
    def check() -> bool:
        with redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0) as client:
            return bool(client.ping())

    return check


def line_seen(child: Child, marker: str) -> Callable[[], bool]:
    """True once `child` printed a line containing `marker` (see `Child.look_for`)."""
    child.look_for(marker)
    return lambda: child.line_with(marker) is not None
