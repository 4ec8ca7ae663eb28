"""Hot swap of a large catalog under traffic: does serving notice a 10M-item version loading?

A CPU decoder over the tests' tiny Qwen3 model (built here, SID codebook 8192 x 3, so catalogs
of this project's production shape fit it) follows catalog ``default`` in a redis-server started
here; one gateway in front. Two versions of ``--items`` items are published up front (the second
complete but not current). The loadgen's drivers (widebeam/loadgen) measure capacity with a
closed loop, then send `/v1/recommend` open loop at ``--load`` x capacity; ``--swap-at`` seconds
in, version 2 is made current, and the decoder fetches, verifies and builds it while it serves;
``--gap`` seconds after it serves it, version 1 is made current again, and so on, ``--swaps``
times. Requests are put in windows by when they were due: during a swap (from the activation
until ``--settle`` seconds after the decoder's GetInfo names the new version: the old version
is freed right after) or quiet (before, between and after the swaps: a single before/after
pair on a shared 2-core machine is as noisy as the effect).
Reported: errors (any non-200 or wrong answer), p50/p99 per window and per swap, p99 during ÷
quiet (issue 21's target: 0 errors, ≤ 1.5), and the decoder's RSS before, at its peak and after.

    .venv/bin/python bench/catalog_swap.py [--items 10000000] [--duration 150] [--swap-at 15]
        [--swaps 3] [--gap 15] [--settle 2] [--load 0.5] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import grpc
import redis
from cache_dir import bench_cache
from catalog_scale import commit, machine, make_catalog
from e2e import DecoderProcess
from google.protobuf import empty_pb2
from replicas import GatewayProcess

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.support (bench/ is not a package)
from tests.support.redis_server import RedisServer  # noqa: E402
from widebeam.loadgen.drivers import Sender, closed_loop, open_loop  # noqa: E402
from widebeam.loadgen.http_client import HttpClient  # noqa: E402
from widebeam.loadgen.outcomes import Latency, Outcome  # noqa: E402
from widebeam.loadgen.traffic import TrafficSpec, build_cycle  # noqa: E402
from widebeam.services.catalog.sid_layout import SidLayout  # noqa: E402
from widebeam.services.catalog.store import CatalogStore  # noqa: E402
from widebeam.services.catalog.trie import SidTrie  # noqa: E402
from widebeam.services.catalog.trie_build import build_arrays  # noqa: E402
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc  # noqa: E402
from widebeam.services.decoder.testing.tiny_model import write_tiny_model  # noqa: E402

LEVELS = (8192, 8192, 8192)
CATALOG = "default"


class CatalogIds(AbstractSet[str]):
    """``item-0`` .. ``item-{n-1}``, the ids of both versions, without a 10M-entry set."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __contains__(self, item: object) -> bool:
        found = isinstance(item, str) and re.fullmatch(r"item-(0|[1-9]\d*)", item)
        return bool(found) and int(item[5:]) < self.n  # type: ignore[index]

    def __iter__(self) -> Iterator[str]:
        return (f"item-{i}" for i in range(self.n))

    def __len__(self) -> int:
        return self.n

    def issuperset(self, items: Iterable[object]) -> bool:
        return all(item in self for item in items)


def tiny_model(root: Path) -> Path:
    model = root / "tiny-sid8192x3"
    if not (model / "config.json").exists():
        write_tiny_model(model, sid_levels=LEVELS, base_vocab=200, seed=7)
    return model


def publish_versions(url: str, layout: SidLayout, items: int) -> dict[str, float]:
    """Version 1 current, version 2 complete but not current; same ids, other SIDs."""
    store = CatalogStore(redis.Redis.from_url(url, socket_timeout=600))
    ids = [f"item-{i}" for i in range(items)]
    times = {}
    for version, seed in ((1, 0), (2, 1)):
        t0 = time.perf_counter()
        codes = make_catalog(items, len(LEVELS), LEVELS[0], 0.1, seed)["sids"]
        trie = SidTrie(layout, *build_arrays(ids, codes, layout))
        del codes
        published = store.publish(CATALOG, trie, {"bench": "swap"}, activate=version == 1)
        assert published.version == version, published
        times[f"v{version}_build_publish_s"] = time.perf_counter() - t0
        del trie
    return times


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"{field}:\s*(\d+)", status)[1]) / 1024  # type: ignore[index]


class SwapWatch:
    """Polls the decoder (GetInfo, every 50 ms) for the version it serves, and its RSS."""

    def __init__(self, address: str, pid: int) -> None:
        self.address, self.pid = address, pid
        self.served: str | None = None  # the version GetInfo named last
        self.changed = threading.Event()  # set whenever `served` changes
        self.peak_rss_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SwapWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = decoder_pb2_grpc.DecoderStub(channel)
            while not self._stop.wait(0.05):
                self.peak_rss_mib = max(self.peak_rss_mib, rss_mib(self.pid))
                info = stub.GetInfo(empty_pb2.Empty(), timeout=30)
                served = next((c.version for c in info.catalogs if c.name == CATALOG), None)
                if served != self.served:
                    self.served = served
                    self.changed.set()

    def wait_for(self, version: str, timeout_s: float) -> bool:
        """Blocks until the decoder serves `version` (True) or `timeout_s` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while self.served != version:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            if self.served != version:
                self.changed.wait(min(left, 0.05))
        return True


async def drive(args: argparse.Namespace, gateway_url: str, url: str, decoder: Any) -> dict:
    spec = TrafficSpec(items=[f"item-{i}" for i in range(0, args.items, 997)][:5000],
                       beam_widths=(args.beam,))  # fmt: skip
    calls = build_cycle(spec)
    client = HttpClient(gateway_url, 1024)
    store = CatalogStore(redis.Redis.from_url(url, socket_timeout=60))
    ids = CatalogIds(args.items)
    try:
        warm = Sender(client, ids, 60)
        await closed_loop(warm, calls, 2, 600, 20)
        capacity = Sender(client, ids, 60)
        elapsed = await closed_loop(capacity, calls, args.concurrency, args.capacity_s)
        rate = args.load * sum(o.status == 200 for o in capacity.outcomes) / elapsed
        rss_before = rss_mib(decoder.proc.pid)
        sender = Sender(client, ids, 60)
        origin, origin_wall = time.monotonic(), time.time()
        swaps: list[dict[str, float | None]] = []

        async def swap_repeatedly(watch: SwapWatch) -> None:
            """Version 2, back to 1, to 2 ...: each swap `--gap` s after the last one ended,
            while its end still leaves a quiet `--gap` before the open loop ends."""
            due = args.swap_at
            for i in range(args.swaps):
                await asyncio.sleep(max(0.0, due - (time.monotonic() - origin)))
                version = 2 if i % 2 == 0 else 1
                at = time.monotonic() - origin
                swap: dict[str, float | None] = {"version": version, "at": at, "ready": None}
                swaps.append(swap)
                await asyncio.to_thread(store.activate, CATALOG, version)
                if await asyncio.to_thread(watch.wait_for, str(version), args.duration):
                    swap["ready"] = time.monotonic() - origin
                else:
                    return
                due = swap["ready"] + args.gap  # type: ignore[operator]
                if due + args.gap > args.duration:
                    return

        with SwapWatch(decoder.address, decoder.proc.pid) as watch:
            swapping = asyncio.create_task(swap_repeatedly(watch))
            await open_loop(sender, calls, rate, args.duration)
            await swapping
            peak = watch.peak_rss_mib
    finally:
        await client.close()
    return {"capacity_rps": len(capacity.outcomes) / elapsed, "rate_rps": rate,
            "outcomes": sender.outcomes, "swaps": swaps,
            "origin_unix_s": origin_wall,  # to line the timeline up with the services' logs
            "rss_before_mib": rss_before, "rss_peak_mib": peak,
            "rss_after_mib": rss_mib(decoder.proc.pid)}  # fmt: skip


def windows(run: dict, settle_s: float) -> dict[str, Any]:
    """Requests by when they were due: during a swap (from its activation until `settle_s`
    after the decoder serves the new version) or quiet (every other moment of the open loop:
    before, between and after the swaps, so drifts of the machine's own speed fall on both
    sides alike)."""
    outcomes: list[Outcome] = run["outcomes"]
    swaps = run["swaps"]
    if not swaps or any(s["ready"] is None for s in swaps):
        raise RuntimeError(f"a swap never completed during the run: {swaps}")
    spans = [(s["at"], s["ready"] + settle_s) for s in swaps]

    def span_of(o: Outcome) -> int | None:
        return next((i for i, (a, b) in enumerate(spans) if a <= o.sent <= b), None)

    parts: dict[str, list[Outcome]] = {"quiet": [], "during": []}
    per_swap: list[list[Outcome]] = [[] for _ in spans]
    for o in outcomes:
        i = span_of(o)
        parts["quiet" if i is None else "during"].append(o)
        if i is not None:
            per_swap[i].append(o)
    out: dict[str, Any] = {name: _window(part) for name, part in parts.items()}
    quiet, during = out["quiet"]["latency"].p99_ms, out["during"]["latency"].p99_ms
    out["p99_during_over_quiet"] = during / quiet if quiet else None
    out["swaps"] = [
        _window(part) | {"version": s["version"], "at_s": s["at"], "swap_s": s["ready"] - s["at"]}
        for s, part in zip(swaps, per_swap, strict=True)
    ]
    return out


def _window(part: list[Outcome]) -> dict[str, Any]:
    errors = [o for o in part if o.status != 200 or o.problem is not None]
    answered = [o.latency for o in part if o.status == 200]
    return {"requests": len(part), "errors": len(errors),
            "problems": sorted({o.problem or str(o.status) for o in errors})[:5],
            "latency": Latency.of(answered)}  # fmt: skip


def report(args: argparse.Namespace, run: dict, win: dict, setup: dict) -> str:
    def row(name: str, w: dict[str, Any]) -> str:
        lat = w["latency"]
        return (f"| {name} | {w['requests']} | {w['errors']} | {lat.p50_ms:.0f} | "
                f"{lat.p99_ms:.0f} | {lat.max_ms:.0f} |")  # fmt: skip

    rows = [row("quiet", win["quiet"]), row("during the swaps", win["during"])]
    rows += [row(f"swap {i + 1} (to v{s['version']} at {s['at_s']:.0f} s, {s['swap_s']:.1f} s)", s)
             for i, s in enumerate(win["swaps"])]  # fmt: skip
    errors = win["quiet"]["errors"] + win["during"]["errors"]
    ratio = win["p99_during_over_quiet"]
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    swap_s = [s["swap_s"] for s in win["swaps"]]
    return "\n".join([
        f"- date: {time.strftime('%Y-%m-%d')}; machine: {machine()} (load average {load} at the "
        f"end); commit: {commit()}",
        f"- command: `{args.command}`",
        f"- catalog: {args.items:,} items per version, SID codebook 8192 x 3; tiny Qwen3 "
        f"decoder on the CPU, beam {args.beam}; publish (before the run) "
        f"{setup['v1_build_publish_s']:.0f} s + {setup['v2_build_publish_s']:.0f} s",
        f"- capacity (closed loop, {args.concurrency} clients) {run['capacity_rps']:.1f} req/s; "
        f"open loop at {run['rate_rps']:.1f} req/s ({args.load:.0%}) for {args.duration:.0f} s; "
        f"{len(swap_s)} swaps (v1 -> v2 -> v1 ...), each {min(swap_s):.1f}-{max(swap_s):.1f} s "
        "(fetch, verify, trie, index, tensors)",
        f"- decoder RSS: {run['rss_before_mib']:.0f} MiB before, peak {run['rss_peak_mib']:.0f} "
        f"MiB during the swaps (both versions held), {run['rss_after_mib']:.0f} MiB after",
        f"- **errors {errors}; p99 during the swaps ÷ quiet = "
        f"{'n/a' if ratio is None else f'{ratio:.2f}'}** (targets: 0; ≤ 1.5)",
        "",
        "| window | requests | errors | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
    ])  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=10_000_000)
    p.add_argument("--duration", type=float, default=150.0, help="open-loop seconds")
    p.add_argument("--swap-at", type=float, default=15.0, help="first swap, s into the loop")
    p.add_argument("--swaps", type=int, default=3, help="swaps: v2, back to v1, v2, ...")
    p.add_argument("--gap", type=float, default=15.0, help="quiet seconds between swaps")
    p.add_argument(
        "--settle",
        type=float,
        default=2.0,
        help="seconds after a swap still counted as during it (the old version goes)",
    )
    p.add_argument("--load", type=float, default=0.5, help="open-loop rate ÷ capacity")
    p.add_argument("--capacity-s", type=float, default=10.0)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--beam", type=int, default=8)
    p.add_argument("--json", help="also write the raw results there")
    args = p.parse_args()
    args.command = " ".join([".venv/bin/python", "bench/catalog_swap.py", *sys.argv[1:]])
    cache = bench_cache()
    model = tiny_model(cache)
    layout = SidLayout.from_tokenizer(model)
    assert layout is not None
    with tempfile.TemporaryDirectory(prefix="widebeam-swap-bench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        decoder = gateway = None
        try:
            setup = publish_versions(server.url, layout, args.items)
            print(f"published: {setup}", file=sys.stderr)
            decoder = DecoderProcess(model, 64, 16384, "--dtype", "float32", "--redis-url",
                                     server.url, "--catalogs", CATALOG)  # fmt: skip
            decoder.wait_ready(600)
            gateway = GatewayProcess([decoder.address], args.beam)
            gateway.wait_ready(600)
            run = asyncio.run(drive(args, gateway.url, server.url, decoder))
        finally:
            for proc in (gateway, decoder):
                if proc is not None:
                    proc.stop()
            server.stop()
    win = windows(run, args.settle)
    text = report(args, run, win, setup)
    if args.json:
        raw = {k: v for k, v in run.items() if k != "outcomes"} | {"setup": setup}
        raw["windows"] = {k: (v | {"latency": vars(v["latency"])} if isinstance(v, dict) else v)
                          for k, v in win.items()}  # fmt: skip
        # every request (seconds after the open loop began, ms, status): where the slow ones fall
        raw["timeline"] = [(round(o.sent, 4), round(o.latency * 1000, 1), o.status)
                           for o in run["outcomes"]]  # fmt: skip
        Path(args.json).write_text(json.dumps(raw, indent=1, default=str))
    print(text)


if __name__ == "__main__":
    main()
