"""Serve the app with uvicorn on an address we bind ourselves, so ``--port 0`` logs the
port that was actually picked."""

from __future__ import annotations

import logging
import signal
import socket

import uvicorn

from widebeam.services.catalog.service.app import create_app
from widebeam.services.catalog.service.settings import CatalogSettings
from widebeam.services.http.connections import ConnectionPolicy, guarded_protocol
from widebeam.services.http.log_rate_limit import install_log_rate_limit

log = logging.getLogger("widebeam.catalog.service")


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP; without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(settings: CatalogSettings) -> None:
    level = settings.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    log.info("catalog service listening on http://%s:%d", shown, port)
    config = uvicorn.Config(
        app,
        log_level=level.lower(),
        # The request body is streamed by the upload route; keep-alive for CLI retries.
        timeout_keep_alive=settings.keep_alive_timeout_s,
        http=guarded_protocol(ConnectionPolicy.from_settings(settings)),
        log_config=None,  # keep the root logging set up above (one format for all lines)
    )
    install_log_rate_limit(settings.log_rate_limit, settings.log_rate_interval_s)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the handler
    # it found installed; a no-op handler turns that into a normal return (exit status 0).
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: None)
    uvicorn.Server(config).run(sockets=[sock])
    log.info("catalog service stopped")
