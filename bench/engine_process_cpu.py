"""CPU time per Recommend in the decoder's engine process, thread by thread, with its gRPC port
in that process (`--api-processes 0`) and served by API processes (`--api-processes 1`).

Behind the APIs the engine thread shares its process' interpreter lock with whatever else runs
there: the gRPC port's thread, or (with API processes) the thread that reads and answers their
socket. This measures how much of that work each mode leaves in the engine's process and how
much moves to the API process, per request, on the CPU: a real decoder on the tiny SID model
and a 400-item catalog, `--concurrency` Recommend calls in flight (60-item histories, beam =
n = `--width`), each mode `--rounds` times in alternation. The engine thread is the process'
busiest thread; the rest are summed. (On the CPU the engine thread's forwards dominate; the
other threads' shares are what carries over to a GPU host.)

    python bench/engine_process_cpu.py [--width 50] [--requests 300] [--rounds 3] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from pathlib import Path

import grpc
from cache_dir import add_cache_argument
from catalogs import random_catalog
from e2e import DecoderProcess
from harness import environment, markdown_table, write_json
from stack import SMOKE_LEVELS, smoke_model

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc

TICKS = os.sysconf("SC_CLK_TCK")
HISTORY = 60


def _cpu_seconds(stat_path: str) -> float:
    """utime + stime of a /proc stat file (fields after the command name)."""
    with open(stat_path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):  # the thread ended meanwhile
            out[int(tid)] = _cpu_seconds(f"/proc/{pid}/task/{tid}/stat")
    return out


def children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError):
            continue
        if parent == pid:
            kids.append(int(entry))
    return kids


async def closed_loop(
    address: str, items: list[str], width: int, concurrency: int, count: int, seed: int
) -> float:
    """Sends `count` Recommend calls, `concurrency` in flight; returns the wall seconds."""
    rng = random.Random(seed)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        slots = asyncio.Semaphore(concurrency)

        async def one() -> None:
            request = pb.RecommendRequest(
                history_item_ids=rng.sample(items, HISTORY), n=width, beam_width=width
            )
            async with slots:
                await stub.Recommend(request)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(count)))
        return time.perf_counter() - started


def measure(args: argparse.Namespace, model: Path, catalog: Path, items: list[str],
            api_processes: int, seed: int) -> dict[str, float]:  # fmt: skip
    decoder = DecoderProcess(
        model, 4096, 60_000, "--catalog", str(catalog),
        "--api-processes", str(api_processes), env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        decoder.wait_ready()
        warm = 2 * args.concurrency
        asyncio.run(closed_loop(decoder.address, items, args.width, args.concurrency, warm, seed))
        pid = decoder.proc.pid
        api = children(pid)
        threads_before = thread_cpu(pid)
        api_before = sum(_cpu_seconds(f"/proc/{p}/stat") for p in api)
        wall = asyncio.run(
            closed_loop(
                decoder.address, items, args.width, args.concurrency, args.requests, seed + 1
            )
        )
        threads_after = thread_cpu(pid)
        api_after = sum(_cpu_seconds(f"/proc/{p}/stat") for p in api)
    finally:
        decoder.stop()
    per_thread = sorted(
        (1000 * (cpu - threads_before.get(tid, 0.0)) / args.requests
         for tid, cpu in threads_after.items()),
        reverse=True,
    )  # fmt: skip
    return {
        "api_processes": api_processes,
        "req_per_s": args.requests / wall,
        "engine_thread_ms": per_thread[0],
        "other_threads_ms": sum(per_thread[1:]),
        "api_processes_ms": 1000 * (api_after - api_before) / args.requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=50, help="beam width (= n)")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--requests", type=int, default=300, help="timed calls per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode, alternated")
    add_cache_argument(parser)
    parser.add_argument("--smoke", action="store_true", help="a few requests, one round")
    args = parser.parse_args()
    if args.smoke:
        args.width, args.requests, args.rounds, args.concurrency = 4, 8, 1, 2
    if min(args.width, args.concurrency, args.requests, args.rounds) < 1:
        parser.error("--width, --concurrency, --requests and --rounds must be >= 1")
    model = smoke_model(args.cache)
    catalog = random_catalog(400, SMOKE_LEVELS)
    with catalog.open() as fh:
        items = [json.loads(line)["item_id"] for line in fh]
    runs = [
        measure(args, model, catalog, items, api, seed=100 * r)
        for r in range(args.rounds)
        for api in ((0, 1) if r % 2 == 0 else (1, 0))
    ]
    keys = ("req_per_s", "engine_thread_ms", "other_threads_ms", "api_processes_ms")
    rows = []
    for api in (0, 1):
        mine = [run for run in runs if run["api_processes"] == api]
        medians = [statistics.median(run[key] for run in mine) for key in keys]
        rows.append([api, *(f"{value:.2f}" for value in medians)])
    print(markdown_table(
        ["--api-processes", "req/s", "engine thread CPU ms/req",
         "engine process' other threads ms/req", "API processes ms/req"],
        rows,
    ))  # fmt: skip
    write_json("engine_process_cpu", {"env": environment(), "args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
