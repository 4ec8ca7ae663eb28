"""End-to-end timing through the decoder service: a `widebeam decoder serve` subprocess and an
asyncio gRPC client that sends `Generate` calls at a fixed rate with a concurrency cap. The
decoder and the client both follow `WIDEBEAM_DECODER_AUTH_TOKEN` and the TLS variables, if set."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from google.protobuf import empty_pb2
from harness import DEVICE, RunStats

from widebeam.services.decoder.config import DType
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2, decoder_pb2_grpc
from widebeam.services.decoder.security.client import ChannelSecurity


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def service_log(name: str, port: int) -> Path:
    """Where a bench's server subprocess writes its output. Not under $OUT by default: the
    device machine returns at most 8 files from there, and one log per replica could crowd out
    the results. WIDEBEAM_BENCH_LOGS keeps them."""
    logs = Path(os.environ.get("WIDEBEAM_BENCH_LOGS") or tempfile.gettempdir())
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{name}-{port}.log"


def exit_report(name: str, returncode: int | None, log: Path) -> str:
    """A server that exited before it was ready: its exit code and the end of its log."""
    tail = log.read_text(errors="replace")[-2000:]
    return f"{name} exited with {returncode}; end of {log}:\n{tail}"


class DecoderProcess:
    def __init__(
        self,
        model: Path,
        max_rows: int,
        max_kv_slots: int | None,  # None: sized by kv_memory_fraction of the GPU memory left free
        *extra: str,
        env: dict[str, str] | None = None,  # e.g. CUDA_VISIBLE_DEVICES for one replica per GPU
        kv_memory_fraction: float = 0.75,  # leaves the start-up capture of max_rows its workspace
    ) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "widebeam",
            "decoder",
            "serve",
            "--model",
            str(model),
            "--device",
            DEVICE,
            "--dtype",
            DType.BFLOAT16,
            "--port",
            str(self.port),
            "--max-rows",
            str(max_rows),
            *(
                ("--kv-memory-fraction", str(kv_memory_fraction))
                if max_kv_slots is None
                else ("--max-kv-slots", str(max_kv_slots))
            ),
            "--max-message-bytes",
            str(256 << 20),
            *extra,
        ]
        self.info: decoder_pb2.GetInfoResponse | None = None  # set by wait_ready
        self.log = log = service_log("decoder", self.port)
        self.proc = subprocess.Popen(
            cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(exit_report("decoder", self.proc.returncode, self.log))
            try:
                with ChannelSecurity.from_env().channel(self.address) as channel:
                    stub = decoder_pb2_grpc.DecoderStub(channel)
                    self.info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
                    return
            except grpc.RpcError:
                time.sleep(1.0)
        raise TimeoutError("decoder did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def drive_grpc(
    address: str, requests: list[decoder_pb2.GenerateRequest], qps: float | None, concurrency: int
) -> RunStats:
    options = [("grpc.max_receive_message_length", 256 << 20)]
    async with ChannelSecurity.from_env().aio_channel(address, options) as channel:
        stub = decoder_pb2_grpc.DecoderStub(channel)
        slots = asyncio.Semaphore(concurrency)
        latencies: list[float] = []

        async def one(req: decoder_pb2.GenerateRequest, at: float) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            async with slots:
                start = time.perf_counter()
                await stub.Generate(req, timeout=600)
                latencies.append((time.perf_counter() - start) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(
            *(one(r, 0 if qps is None else i / qps) for i, r in enumerate(requests))
        )
        return RunStats(latencies, time.perf_counter() - t0)


def generate_request(
    rid: str, prompt: list[int], beams: int, tokens: int, **extra: object
) -> decoder_pb2.GenerateRequest:
    return decoder_pb2.GenerateRequest(
        request_id=rid, input_ids=prompt, beam_width=beams, n=beams, max_new_tokens=tokens, **extra
    )
