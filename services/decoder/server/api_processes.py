"""API processes: the gRPC port served outside the engine's process (`api_processes` > 0).

Each API process parses and validates requests, answers what it can refuse by itself and
builds the protobuf responses; the engine's process keeps only the scheduler, the device loop
and the catalogs, so gRPC's threads and protobuf work never take the interpreter lock from the
engine thread. They talk over a Unix socket (`engine_wire.py`); every API process listens on
the same port (SO_REUSEPORT: the kernel spreads connections over them).

The engine's process holds the port (bound, not listening) from the start, so `--port 0`
names one port for all of them, and starts the API processes (spawned: no CUDA or gRPC state
is forked) before it loads the model; they report NOT_SERVING and answer UNAVAILABLE until
they are connected to the ready engine. One that exits is started again after a second; one
whose parent is gone stops.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
import tempfile
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from grpc_health.v1 import health_pb2

from widebeam.services.decoder.server.grpc_port import bind, grpc_server, set_health
from widebeam.services.decoder.server.remote_engine import RemoteEngine
from widebeam.services.decoder.server.servicer import DecoderServicer
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.listen_socket import bound_socket
from widebeam.services.long_lived import freeze_start_up_objects

log = logging.getLogger("widebeam.decoder")

RESTART_DELAY_S = 1.0
SOCKET_NAME = "engine.sock"


class ApiProcesses:
    """The engine process' side: the held port, the socket path, the supervised children."""

    def __init__(self, settings: DecoderSettings) -> None:
        self.settings = settings
        self._holder = bound_socket(
            settings.host, settings.port, reuse_port=True, sharing="api_processes"
        )
        self.port: int = self._holder.getsockname()[1]
        self._dir = tempfile.TemporaryDirectory(prefix="widebeam-decoder-")  # mode 0700
        self.socket_path = Path(self._dir.name) / SOCKET_NAME
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[BaseProcess] = []
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        """The live API processes."""
        return [p.pid for p in self._processes if p.pid is not None and p.exitcode is None]

    def start(self) -> ApiProcesses:
        self._processes = [self._spawn(i) for i in range(self.settings.api_processes)]
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())
        return self

    async def stop(self, grace: float) -> None:
        """SIGTERM each (they finish the calls in flight within `grace`), then wait."""
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        await asyncio.to_thread(self._join, grace + 10.0)
        self._holder.close()
        self._dir.cleanup()

    def _join(self, timeout: float) -> None:
        for process in self._processes:
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()

    def _spawn(self, index: int) -> BaseProcess:
        fields = self.settings.model_dump()  # SecretStr values survive the pickle of spawn
        process = self._context.Process(
            target=api_process_main,
            args=(fields, self.port, str(self.socket_path), index),
            name=f"decoder-api-{index}",
            daemon=True,  # never outlives the engine's process
        )
        process.start()
        return process

    async def _supervise(self) -> None:
        while not self._stopping:
            await asyncio.sleep(0.5)
            for index, process in enumerate(self._processes):
                if process.exitcode is not None and not self._stopping:
                    log.warning("API process %d exited with %s; starting it again", index,
                                process.exitcode)  # fmt: skip
                    await asyncio.sleep(RESTART_DELAY_S)
                    if not self._stopping:
                        self._processes[index] = self._spawn(index)


# ----- in the API process --------------------------------------------------------------------
def api_process_main(fields: dict[str, Any], port: int, socket_path: str, index: int) -> None:
    settings = DecoderSettings.model_validate(fields)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s[api {index}]: %(message)s",
    )
    asyncio.run(_serve(settings, port, Path(socket_path)))


async def _serve(settings: DecoderSettings, port: int, socket_path: Path) -> None:
    servicer = DecoderServicer()
    server, checks = grpc_server(settings, servicer)
    await set_health(checks, health_pb2.HealthCheckResponse.NOT_SERVING)
    bind(server, settings, port)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parent = multiprocessing.parent_process()
    if parent is not None:
        loop.add_reader(parent.sentinel, stop.set)  # readable once the parent is gone

    engine = RemoteEngine(socket_path)

    async def on_change(connected: bool) -> None:
        if connected:
            servicer.attach(engine)
        serving = health_pb2.HealthCheckResponse
        await set_health(checks, serving.SERVING if connected else serving.NOT_SERVING)

    link = asyncio.create_task(engine.run(on_change))
    # (a decoded wide answer is thousands of small objects: a full pass over everything took
    # longer than decoding it)
    freeze_start_up_objects()
    await stop.wait()
    await checks.enter_graceful_shutdown()
    await server.stop(settings.grace_period_s)
    link.cancel()
