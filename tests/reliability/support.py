"""Helpers of the reliability suite: real services on free ports, RSS readings, log capture."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import httpx
import uvicorn

from tests.support.child_process import stop_child
from tests.support.tls_certs import make_test_certs
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.catalog.service import create_app as create_catalog_app
from widebeam.services.catalog.service.server import bind
from widebeam.services.gateway.app import create_app as create_gateway_app
from widebeam.services.gateway.settings import GatewaySettings

ROOT = Path(__file__).resolve().parents[2]
WIDEBEAM = [sys.executable, "-m", "widebeam"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default), from /proc."""
    with open(f"/proc/{pid or os.getpid()}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc status")


class ServedApp:
    """An ASGI app under uvicorn on a thread, on a free port of 127.0.0.1.

    The socket comes from the catalog service's `bind` (TCP proto, so responses are not held
    back by Nagle); the gateway tests' GatewayServer binds a proto-0 socket, ~45 ms a call."""

    def __init__(self, app: Any, keep_alive_s: float = 5.0) -> None:
        self.app = app
        sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            app, log_config=None, log_level="warning", loop="asyncio",
            timeout_keep_alive=keep_alive_s,
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [sock]}, daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the app did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(15)


class CatalogApp(ServedApp):
    def __init__(self, settings: CatalogSettings) -> None:
        self.settings = settings
        super().__init__(create_catalog_app(settings), settings.keep_alive_timeout_s)


class GatewayApp(ServedApp):
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        super().__init__(create_gateway_app(settings), settings.keep_alive_timeout_s)


@contextmanager
def process(
    args: list[str], env: dict[str, str], log_path: Path, ready: str, timeout: float = 120.0
) -> Iterator[subprocess.Popen[bytes]]:
    """A `widebeam ...` child process, stdout+stderr to `log_path`; yields once `ready` appears
    in its log. Stopped with SIGTERM (then SIGKILL) at the end."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            WIDEBEAM + args, env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
    try:
        deadline = time.monotonic() + timeout
        while ready not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{args[:2]} did not become ready:\n{tail}")
            time.sleep(0.05)
        yield proc
    finally:
        stop_child(proc)


def listening_url(log_path: Path, marker: str) -> str:
    """`http://HOST:PORT` from a 'listening on http://HOST:PORT' log line."""
    for line in log_path.read_text(errors="replace").splitlines():
        if marker in line:
            return "http://" + line.split("http://", 1)[1].split()[0].rstrip(")")
    raise AssertionError(f"no {marker!r} line in {log_path}")


def wait_http(url: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=5, **kwargs)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class SecureRedis:
    """redis-server with `--requirepass`, optionally TLS-only (certificates of a throwaway CA)."""

    def __init__(self, workdir: Path, password: str, tls: bool) -> None:
        self.workdir, self.password, self.tls = workdir, password, tls
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.ca = workdir / "ca.crt"

    @property
    def url(self) -> str:
        if not self.tls:
            return f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        # ssl_cert_reqs / ssl_ca_certs: read by redis-py from the URL; Celery needs the first.
        query = f"ssl_cert_reqs=required&ssl_ca_certs={self.ca}"
        return f"rediss://:{self.password}@127.0.0.1:{self.port}/0?{query}"

    def _make_certs(self) -> list[str]:
        """redis-server's TLS flags, over certificates signed by a throwaway CA (`self.ca`)."""
        certs = make_test_certs(self.workdir)
        self.ca = certs.ca
        return ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file",
                str(certs.server_cert), "--tls-key-file", str(certs.server_key),
                "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "no"]  # fmt: skip

    def __enter__(self) -> SecureRedis:
        import redis

        self.workdir.mkdir(parents=True, exist_ok=True)
        ports = self._make_certs() if self.tls else ["--port", str(self.port)]
        cmd = ["redis-server", *ports, "--bind", "127.0.0.1", "--save", "", "--appendonly",
               "no", "--requirepass", self.password]  # fmt: skip
        log = (self.workdir / "redis.log").open("wb")
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=log, stderr=log)
        deadline = time.monotonic() + 15
        while True:
            try:
                with redis.Redis.from_url(self.url) as client:
                    client.ping()
                return self
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_child(self.proc, grace_s=10)
