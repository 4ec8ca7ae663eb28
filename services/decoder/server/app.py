"""Build and run the decoder's gRPC server.

Start-up order: bind (TLS with a certificate configured; the bearer-token check with a token)
and serve health (NOT_SERVING) first, load the model and capture the start-up list's CUDA
graphs off the event loop (`capture_at_start`), serve /metrics when `metrics_port` is set,
start the engine thread and the catalog follower, then flip health to SERVING. Until then the
Decoder RPCs answer UNAVAILABLE. SIGTERM/SIGINT: health NOT_SERVING, in-flight RPCs get
`grace_period_s`, then the engine and the follower stop. With `api_processes` the port is
served by that many API processes (`api_processes.py`), started first, which go SERVING once
connected to the ready engine.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.scheduler.finish_calibration import FinishCalibration
from widebeam.services.decoder.server.api_processes import ApiProcesses
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.catalog_sync import CatalogSync
from widebeam.services.decoder.server.engine_handle import ServerInfo
from widebeam.services.decoder.server.engine_port import EnginePort
from widebeam.services.decoder.server.grpc_port import (
    bind,
    grpc_server,
    security_words,
    set_health,
)
from widebeam.services.decoder.server.local_engine import LocalEngine
from widebeam.services.decoder.server.metrics import DecoderMetrics
from widebeam.services.decoder.server.request_limits import RequestLimits
from widebeam.services.decoder.server.servicer import DecoderServicer
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.decoder.server.timeline_recorder import TimelineRecorder
from widebeam.services.long_lived import freeze_start_up_objects

log = logging.getLogger("widebeam.decoder")

CATALOG_READY_TIMEOUT_S = 10.0  # how long start-up waits for the first Redis catalog read
API_CONNECT_TIMEOUT_S = 60.0  # how long start-up waits for the API processes to connect


def model_layout(model_dir: str, spec: str | None, vocab_size: int) -> SidLayout | None:
    """The model's SID layout: from `spec`, else the tokenizer; None when it has no SID tokens
    (then only unconstrained Generate works)."""
    if spec:
        layout = SidLayout.parse(spec)
    elif (Path(model_dir) / "tokenizer.json").is_file():
        layout = SidLayout.from_tokenizer(model_dir)
    else:
        layout = None
    if layout is not None:
        layout.validate_against_vocab(vocab_size)
    return layout


def build_engine(settings: DecoderSettings) -> tuple[Engine, SidLayout | None]:
    """The engine, its start-up graphs captured (a no-op without CUDA graphs), and its layout."""
    engine = Engine(settings.engine_config())
    engine.warm_up()
    layout = engine.sid_layout or model_layout(
        settings.model, settings.sid_layout, engine.vocab_size
    )
    return engine, layout


class DecoderServer:
    def __init__(self, settings: DecoderSettings) -> None:
        self.settings = settings
        self.servicer = DecoderServicer()
        self.engine: AsyncEngine | None = None
        self.catalog_sync: CatalogSync | None = None
        self.server: grpc.aio.Server | None = None  # the port, when this process serves it
        self.health: health.aio.HealthServicer | None = None
        self.api: ApiProcesses | None = None  # the processes serving it otherwise
        self.engine_port: EnginePort | None = None
        self.metrics: DecoderMetrics | None = None
        self.port = 0
        self.metrics_port: int | None = None  # bound, when metrics_port is set

    async def start(self) -> int:
        """Bind, serve health, load the model, go SERVING; returns the bound port."""
        s = self.settings
        if s.api_processes:
            self.api = ApiProcesses(s).start()
            self.port = self.api.port
        else:
            self.server, self.health = grpc_server(s, self.servicer)
            await set_health(self.health, health_pb2.HealthCheckResponse.NOT_SERVING)
            self.port = bind(self.server, s, s.port)
            await self.server.start()
        served_by = f"{s.api_processes} API processes" if s.api_processes else "this process"
        log.info(
            "decoder listening on %s:%d (%s, served by %s; loading %s)",
            s.host, self.port, security_words(s), served_by, s.model,
        )  # fmt: skip
        engine, layout = await asyncio.to_thread(build_engine, s)
        freeze_start_up_objects()  # the model, the runner, imported code
        calibration = FinishCalibration()
        if s.metrics_port is not None:
            self.metrics = DecoderMetrics(
                engine.runner.capture_counts, engine.scheduler.kv, engine.step_counts,
                calibration,
            )  # fmt: skip
            self.metrics_port = self.metrics.serve(s.host, s.metrics_port)
            log.info("decoder metrics on http://%s:%d/metrics", s.host, self.metrics_port)
        timeline = None if s.profile_dir is None else TimelineRecorder(engine, s.profile_dir)
        self.engine = AsyncEngine(
            engine,
            s.max_waiting,
            s.max_queue_wait_s,
            timeline=timeline,
            answers_at_step_start=s.answers_at_step_start,
            group_wait_s=s.group_wait_ms / 1000,
            calibration=calibration,
        ).start()
        if s.redis_url:
            self.catalog_sync = CatalogSync(
                self.engine, s.redis_url, s.catalogs, layout, engine.device, s.catalog_namespace
            ).start()
            ready = self.catalog_sync.subscriber.wait_ready
            if not await asyncio.to_thread(ready, CATALOG_READY_TIMEOUT_S):
                log.warning("catalogs in Redis not read yet; serving, and still following")
            await asyncio.to_thread(self.engine.wait_for_swaps, CATALOG_READY_TIMEOUT_S)
        info = ServerInfo(
            str(Path(s.model).resolve()), engine.model.config.model_type, layout,
            s.device, s.dtype, s.max_message_bytes, RequestLimits.resolve(s, engine.limits),
        )  # fmt: skip
        local = LocalEngine(self.engine, info)
        engine.mark_ready()
        if self.api is not None:
            self.engine_port = await EnginePort(local, self.api.socket_path).start()
            if not await self.engine_port.wait_for_connections(
                s.api_processes, API_CONNECT_TIMEOUT_S
            ):
                log.warning(
                    "%d of %d API processes connected; serving, the rest connect when up",
                    self.engine_port.connections, s.api_processes,
                )  # fmt: skip
        else:
            assert self.health is not None
            self.servicer.attach(local)
            await set_health(self.health, health_pb2.HealthCheckResponse.SERVING)
        log.info("decoder serving on %s:%d", s.host, self.port)
        return self.port

    def toggle_timeline(self) -> None:
        """SIGUSR1: start a device timeline, or stop and write it (with profile_dir)."""
        if self.settings.profile_dir is None:
            log.warning("SIGUSR1 ignored: device timelines need --profile-dir")
            return
        if self.engine is None:
            log.warning("device timeline: the engine is not loaded yet; signal ignored")
            return
        self.engine.toggle_timeline()
        log.info("device timeline toggled")

    async def stop(self, grace: float | None = None) -> None:
        grace = self.settings.grace_period_s if grace is None else grace
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.server is not None:
            await self.server.stop(grace)
        if self.api is not None:
            await self.api.stop(grace)  # their calls in flight finish against the engine
        if self.engine_port is not None:
            await self.engine_port.stop()
        if self.catalog_sync is not None:
            self.catalog_sync.stop()
        if self.engine is not None:
            await asyncio.to_thread(self.engine.stop)
        if self.metrics is not None:
            self.metrics.stop()
        log.info("decoder stopped")


async def serve(settings: DecoderSettings) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully."""
    server = DecoderServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, server.toggle_timeline)
    start = asyncio.create_task(server.start())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
    try:
        if start.done():
            start.result()  # start-up errors (bad model dir, port taken) end the process
            await waiter
            log.info("decoder shutting down")
        else:
            start.cancel()
    finally:
        waiter.cancel()
        await server.stop()


def run(settings: DecoderSettings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(serve(settings))
