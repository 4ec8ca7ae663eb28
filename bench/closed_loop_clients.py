"""Closed-loop clients in processes of their own (stack.py's service phases).

Clients that share one event loop in one process read their answers one at a time, so one
client's host time can delay another's next request; real callers are separate machines. Here
each client process runs its share of the clients on its own loop, with connections opened
once (at the pool's start) and kept across phases. (Measured on the H200 against all clients in
one process: the cohorts the engine sees hardly changed, docs/benchmarks.md, thirteenth
session; the clients are kept apart so the client is never the question.)

A phase: every process gets its slice of the requests and a common start time (wall clock);
each runs its clients from then until its slice is done, and reports what was answered and
when it finished. The phase's wall time runs from the start to the last process' end.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.pool import Pool

import grpc
import httpx

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.security.client import ChannelSecurity

GRPC_RECOMMEND = "grpc Recommend"
START_MARGIN_S = 0.3  # from sending the slices to the common start: every process has its slice


@dataclass
class SliceOutcome:
    statuses: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)  # answered requests only
    ended_at: float = 0.0  # time.time() when its last request was answered


@dataclass
class _Connections:
    loop: asyncio.AbstractEventLoop
    stub: pb_grpc.DecoderStub
    http: httpx.AsyncClient


_connections: _Connections | None = None  # one per client process (set by the initializer)


def _open(decoder: str, gateway: str, max_connections: int) -> None:
    global _connections
    loop = asyncio.new_event_loop()
    options = [("grpc.max_receive_message_length", 256 << 20)]

    async def build() -> _Connections:
        channel = ChannelSecurity.from_env().aio_channel(decoder, options)
        limits = httpx.Limits(max_connections=max_connections)
        http = httpx.AsyncClient(base_url=gateway, timeout=600, limits=limits)
        return _Connections(loop, pb_grpc.DecoderStub(channel), http)

    _connections = loop.run_until_complete(build())


def _run_slice(
    path: str, route: str, payloads: list, width: int, clients: int, start_at: float
) -> SliceOutcome:
    """`payloads`: gRPC histories (path GRPC_RECOMMEND) or JSON bodies posted to `route`."""
    assert _connections is not None, "the pool's initializer opens the connections"
    conns = _connections
    outcome = SliceOutcome()
    order = list(reversed(range(len(payloads))))

    async def send(i: int) -> str:
        if path == GRPC_RECOMMEND:
            request = pb.RecommendRequest(history_item_ids=payloads[i], n=width, beam_width=width)
            try:
                response = await conns.stub.Recommend(request, timeout=600)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "OK" if response.items else "EMPTY"
        response = await conns.http.post(route, json=payloads[i])
        if response.status_code == 200 and not _answered(route, response.json()):
            return "200-empty"
        return str(response.status_code)

    async def client() -> None:
        while order:
            i = order.pop()
            start = time.perf_counter()
            status = await send(i)
            outcome.statuses[status] = outcome.statuses.get(status, 0) + 1
            if status in ("200", "OK"):
                outcome.latencies_ms.append((time.perf_counter() - start) * 1000)

    async def run() -> None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(*(client() for _ in range(clients)))
        outcome.ended_at = time.time()

    conns.loop.run_until_complete(run())
    return outcome


def _answered(route: str, body: dict) -> bool:
    """A 200 that carries an answer: recommended items, or chat choices."""
    return bool(body.get("items") if route == "/v1/recommend" else body.get("choices"))


class ClientProcesses:
    """`processes` client processes over `concurrency` clients (spread as evenly as they go)."""

    def __init__(self, processes: int, concurrency: int, decoder: str, gateway: str) -> None:
        if not 1 <= processes <= concurrency:
            raise ValueError(f"client processes must be in 1..{concurrency}, got {processes}")
        self.shares = [
            concurrency // processes + (1 if p < concurrency % processes else 0)
            for p in range(processes)
        ]
        self.pool: Pool = multiprocessing.get_context("spawn").Pool(
            processes, _open, (decoder, gateway, 2 * max(self.shares))
        )

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()

    def run(self, path: str, route: str, payloads: list, width: int) -> tuple[SliceOutcome, float]:
        """Every payload sent once, each process its slice; (the outcomes merged, wall s)."""
        total = sum(self.shares)
        counts = [len(payloads) * share // total for share in self.shares]
        for p in range(len(payloads) - sum(counts)):  # the remainder, one each
            counts[p] += 1
        start_at = time.time() + START_MARGIN_S
        jobs, first = [], 0
        for share, count in zip(self.shares, counts, strict=True):
            jobs.append((path, route, payloads[first : first + count], width, share, start_at))
            first += count
        outcomes = self.pool.starmap(_run_slice, jobs, chunksize=1)
        merged = SliceOutcome()
        for out in outcomes:
            merged.latencies_ms += out.latencies_ms
            for key, n in out.statuses.items():
                merged.statuses[key] = merged.statuses.get(key, 0) + n
        wall = max(out.ended_at for out in outcomes) - start_at
        return merged, wall
