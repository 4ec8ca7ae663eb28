"""Run the gateway's HTTP server: one process, or `workers` processes on one port.

With one worker this process serves (uvicorn on a socket bound here, so `--port 0` can log the
port chosen). With N > 1 it binds the port with SO_REUSEPORT only to hold it (never listens),
starts N worker processes (spawned, so no gRPC state is forked), each of which binds the same
port with SO_REUSEPORT and runs its own app: its own decoder pool, GetInfo poller, metrics and
connection limits. The kernel spreads incoming connections over the workers' sockets by their
addresses, so no worker accepts for the others. A worker that dies is started again after a
second; SIGTERM / SIGINT stops every worker gracefully and exits 0.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.listen_socket import bound_socket

log = logging.getLogger("widebeam.gateway")

RESTART_DELAY_S = 1.0
WORKER_STOP_TIMEOUT_S = 30.0


def serve(settings: GatewaySettings) -> None:
    """Serve until SIGTERM / SIGINT (then return: exit code 0)."""
    _stop_on_signals()
    if settings.workers == 1:
        sock = bind(settings, reuse_port=False)
        host, port = sock.getsockname()[:2]
        log.info("gateway listening on http://%s:%d (decoders: %s)", host, port, settings.decoders)
        run_server(settings, sock, worker=None)
    else:
        _serve_workers(settings)
    log.info("gateway stopped")


def bind(settings: GatewaySettings, *, reuse_port: bool) -> socket.socket:
    return bound_socket(settings.host, settings.port, reuse_port=reuse_port, sharing="workers > 1")


def run_server(settings: GatewaySettings, sock: socket.socket, worker: int | None) -> None:
    import uvicorn

    from widebeam.services.gateway.app import create_app
    from widebeam.services.gateway.worker_header import WorkerHeaderMiddleware
    from widebeam.services.http.connections import ConnectionPolicy, guarded_protocol
    from widebeam.services.http.log_rate_limit import install_log_rate_limit

    app = create_app(settings)
    config = uvicorn.Config(
        app if worker is None else WorkerHeaderMiddleware(app, worker),
        log_level=settings.log_level.lower(),
        loop=settings.event_loop,
        access_log=False,
        http=guarded_protocol(ConnectionPolicy.from_settings(settings)),
        timeout_keep_alive=settings.keep_alive_timeout_s,
    )
    install_log_rate_limit(settings.log_rate_limit, settings.log_rate_interval_s)
    uvicorn.Server(config).run(sockets=[sock])


def configure_logging(settings: GatewaySettings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _serve_workers(settings: GatewaySettings) -> None:
    holder = bind(settings, reuse_port=True)  # holds the port (and picks it for --port 0)
    host, port = holder.getsockname()[:2]
    fixed = settings.model_copy(update={"port": port})
    context = multiprocessing.get_context("spawn")
    workers: dict[int, BaseProcess] = {}
    try:
        for index in range(settings.workers):
            workers[index] = _start_worker(context, fixed, index)
        log.info(
            "gateway listening on http://%s:%d (%d workers; decoders: %s)",
            host, port, settings.workers, settings.decoders,
        )  # fmt: skip
        while True:
            wait([process.sentinel for process in workers.values()])
            for index, process in list(workers.items()):
                if process.exitcode is not None:
                    code = process.exitcode
                    log.warning("gateway worker %d exited with %s; starting it again", index, code)
                    time.sleep(RESTART_DELAY_S)
                    workers[index] = _start_worker(context, fixed, index)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        _stop_workers(list(workers.values()))
        holder.close()


def _start_worker(
    context: multiprocessing.context.SpawnContext, settings: GatewaySettings, index: int
) -> BaseProcess:
    process = context.Process(
        target=_worker_main, args=(settings, index), name=f"gateway-worker-{index}", daemon=False
    )
    process.start()
    return process


def _stop_workers(workers: list[BaseProcess]) -> None:
    for process in workers:
        if process.is_alive():
            process.terminate()  # SIGTERM: uvicorn finishes the requests in progress
    deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
    for process in workers:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _worker_main(settings: GatewaySettings, index: int) -> None:
    """One worker process: its own socket on the shared port, its own app."""
    configure_logging(settings)
    _stop_on_signals()
    sock = bind(settings, reuse_port=True)
    log.info("gateway worker %d serving", index)
    run_server(settings, sock, worker=index)


def _stop_on_signals() -> None:
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal under the
    # handler it found; this one turns that into exit code 0, like the decoder's. In the
    # workers' parent it ends the wait for them, and the workers are stopped.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
