"""Workload 3 through the gateway with one decoder replica per GPU: `/v1/recommend` throughput
at n = beam = 512 with 1 and with 2 replicas behind one `widebeam gateway serve` (issue target:
2 replicas ≥ 1.8× one). Run on a machine with as many GPUs as the largest replica count.

    python bench/replicas.py [--quick] [--replicas 1,2,4] [--width 512|50] [--gateway-workers K]
    python bench/replicas.py --model DIR --catalog FILE --width 8  # CPU smoke run, tiny model

`--gateway-workers K` runs the gateway with `--workers K` (0: one worker per replica). Each row
also has the gateway's CPU time per request (all its processes, user + system, measured run only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
from catalogs import random_catalog
from e2e import DecoderProcess, exit_report, free_port, service_log
from harness import DEVICE, RunStats, environment, markdown_table, model_dir, write_json

LEVELS = (512, 512, 512)  # workload 3's catalog: 430k SIDs, codebook 512
HISTORY_ITEMS = 60
TABLE_HEADERS = [
    "replicas", "gateway workers", "concurrency", "req/s", "p50 ms", "p99 ms",
    "gateway CPU ms/req", "vs 1 replica",
]  # fmt: skip


class GatewayProcess:
    def __init__(
        self,
        decoders: list[str],
        max_width: int,
        workers: int = 1,
        request_timeout_s: float = 300,
        *extra: str,  # more `widebeam gateway serve` flags (a later one wins)
    ) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        cmd = [
            sys.executable, "-m", "widebeam", "gateway", "serve",
            "--port", self.url.rsplit(":", 1)[1], "--decoder", ",".join(decoders),
            "--max-beam-width", str(max_width), "--max-n", str(max_width),
            "--max-history", str(HISTORY_ITEMS), "--request-timeout", str(request_timeout_s),
            "--workers", str(workers), *extra,
        ]  # fmt: skip
        self.log = service_log("gateway", int(self.url.rsplit(":", 1)[1]))
        self.proc = subprocess.Popen(cmd, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(exit_report("gateway", self.proc.returncode, self.log))
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError("gateway did not become ready")

    def cpu_seconds(self) -> float:
        """User + system CPU of the gateway and its live worker processes so far."""
        pids = [self.proc.pid]
        children = f"/proc/{self.proc.pid}/task/{self.proc.pid}/children"
        pids += [int(pid) for pid in Path(children).read_text().split()]
        ticks = 0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def drive(url: str, bodies: list[dict], concurrency: int) -> tuple[RunStats, dict]:
    """Closed loop: `concurrency` clients, each sends its next body when the last is answered.
    Every answer must be a 200 with n distinct items."""
    queue = list(reversed(bodies))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def client(http: httpx.AsyncClient) -> None:
        while queue:
            body = queue.pop()
            start = time.perf_counter()
            resp = await http.post(f"{url}/v1/recommend", json=body)
            latencies.append((time.perf_counter() - start) * 1000)
            statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
            items = [r["item_id"] for r in resp.json().get("items", [])]
            if resp.status_code != 200 or len(set(items)) != len(items) or not items:
                raise RuntimeError(f"bad answer {resp.status_code}: {resp.text[:300]}")

    t0 = time.perf_counter()
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
    return RunStats(latencies, time.perf_counter() - t0), statuses


def run(args: argparse.Namespace, replicas: int, model: Path, catalog: Path, items: list[str]):
    decoders = [
        DecoderProcess(
            model, args.max_rows, args.max_kv_slots, "--catalog", str(catalog),
            # its lockstep beam steps captured before ready too, as an operator who knows the
            # widths served declares them (the row buckets cover one request of each width)
            "--capture-beam-widths", str(args.width),
            env={"CUDA_VISIBLE_DEVICES": str(i)} if DEVICE == "cuda" else None,
        )
        for i in range(replicas)
    ]  # fmt: skip
    gateway = None
    try:
        for d in decoders:
            d.wait_ready()
        workers = args.gateway_workers or replicas
        gateway = GatewayProcess([d.address for d in decoders], args.width, workers)
        gateway.wait_ready()
        rng = random.Random(replicas)

        def body() -> dict:
            history = rng.sample(items, HISTORY_ITEMS)
            return {"history": history, "n": args.width, "beam_width": args.width}

        conc = args.concurrency_per_replica * replicas
        asyncio.run(drive(gateway.url, [body() for _ in range(conc)], conc))  # warm-up wave
        num = args.requests_per_replica * replicas
        cpu_before = gateway.cpu_seconds()
        stats, statuses = asyncio.run(drive(gateway.url, [body() for _ in range(num)], conc))
        cpu_ms = (gateway.cpu_seconds() - cpu_before) * 1000 / num
        return {
            "replicas": replicas, "gateway_workers": workers, "concurrency": conc,
            **stats.summary(), "gateway_cpu_ms_per_request": round(cpu_ms, 3),
            "statuses": statuses,
        }  # fmt: skip
    finally:
        if gateway is not None:
            gateway.stop()
        for d in decoders:
            d.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--gateway-workers", type=int, default=1, help="0: one per replica")
    parser.add_argument("--concurrency-per-replica", type=int, default=12)
    parser.add_argument("--requests-per-replica", type=int, default=48)
    parser.add_argument("--max-rows", type=int, default=16384)
    parser.add_argument("--max-kv-slots", type=int, default=120_000)
    parser.add_argument("--model", type=Path, help="default: workload 3's Qwen3-1.7B + SID model")
    parser.add_argument("--catalog", type=Path, help="default: workload 3's 430k-SID catalog")
    args = parser.parse_args()
    if args.quick:
        args.requests_per_replica = max(args.concurrency_per_replica, 24)
    model = args.model or model_dir("qwen3-1.7b", sid_levels=LEVELS)
    catalog = args.catalog or random_catalog(430_000, LEVELS)
    items = [json.loads(line)["item_id"] for line in catalog.open()]
    rows = [run(args, int(r), model, catalog, items) for r in args.replicas.split(",")]
    base = rows[0]["throughput_rps"] / rows[0]["replicas"]
    for row in rows:
        row["speedup_per_replica_vs_first"] = row["throughput_rps"] / base / row["replicas"]
        print(row, flush=True)
    write_json("replicas", {"env": environment() | {"width": args.width}, "rows": rows})
    print(
        markdown_table(
            TABLE_HEADERS,
            [
                [
                    r["replicas"],
                    r["gateway_workers"],
                    r["concurrency"],
                    r["throughput_rps"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["gateway_cpu_ms_per_request"],
                    f"{r['throughput_rps'] / rows[0]['throughput_rps']:.2f}x",
                ]
                for r in rows
            ],
        )
    )


if __name__ == "__main__":
    main()
