"""The gateway's garbage-collector pauses while it serves, with and without freezing what its
start-up made (`services/long_lived.py`): the same closed-loop `/v1/recommend` load through a
gateway process against one real decoder (a tiny model on the CPU is enough: the gateway's
objects, not the model, are what a full pass walks).

Each gateway process runs with a `gc.callbacks` timer installed before anything is imported;
passes are counted from the moment the app is ready (the freeze's place), by generation, and
written out when the process exits. Each answered request's gateway part is its
`Server-Timing` app time minus its decoder time.

    .venv/bin/python bench/gateway_gc.py [--requests 2000] [--modes off,on,off,on]
    .venv/bin/python bench/gateway_gc.py --smoke      # tests/bench/test_gateway_gc_smoke.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from cache_dir import add_cache_argument
from catalogs import random_catalog
from e2e import DecoderProcess, free_port, service_log
from harness import environment, markdown_table, write_json

from widebeam.services.decoder.testing.tiny_model import write_tiny_model

LEVELS = (32, 32, 32)
SERVER_TIMING = re.compile(r"(\w+);dur=([0-9.]+)")

# Runs the gateway CLI with a collector timer; `freeze_start_up_objects` is wrapped so the
# timer starts counting where the freeze happens, and (mode "off") so it does not freeze.
LAUNCHER = """
import atexit, gc, json, sys, time
mode, report = sys.argv[1], sys.argv[2]
passes, started, ready = {0: [], 1: [], 2: []}, [0.0], [False]
def timer(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    elif ready[0]:
        passes[info["generation"]].append((time.perf_counter() - started[0]) * 1000)
gc.callbacks.append(timer)
atexit.register(lambda: open(report, "w").write(json.dumps(passes)))
import widebeam.services.gateway.app as app
freeze = app.freeze_start_up_objects
def at_ready():
    ready[0] = True
    if mode == "on":
        freeze()
app.freeze_start_up_objects = at_ready
from widebeam.cli import main
sys.exit(main(sys.argv[3:]))
"""


def start_gateway(
    mode: str, decoder: str, width: int, report: Path
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-c", LAUNCHER, mode, str(report), "gateway", "serve",
           "--port", str(port), "--decoder", decoder, "--max-beam-width", str(width),
           "--max-history", "60", "--request-timeout", "120"]  # fmt: skip
    log = service_log(f"gateway-gc-{mode}", port)
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited {proc.returncode}: {log}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise TimeoutError("the gateway did not become ready")


async def closed_loop(url: str, bodies: list[dict], concurrency: int) -> list[float]:
    """Each answered request's gateway part in ms (Server-Timing app - decoder)."""
    parts: list[float] = []
    order = list(reversed(range(len(bodies))))
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:

        async def client() -> None:
            while order:
                response = await http.post("/v1/recommend", json=bodies[order.pop()])
                response.raise_for_status()
                timing = dict(SERVER_TIMING.findall(response.headers["server-timing"]))
                parts.append(float(timing["app"]) - float(timing["decoder"]))

        await asyncio.gather(*(client() for _ in range(concurrency)))
    return parts


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--width", type=int, default=64, help="beam = n of each request")
    parser.add_argument("--modes", default="off,on,off,on", help="freeze off / on, in order")
    parser.add_argument("--smoke", action="store_true", help="a few requests per mode")
    add_cache_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.width, args.modes = 40, 8, "off,on"
    modes = args.modes.split(",")
    if not set(modes) <= {"off", "on"}:
        raise SystemExit("--modes: a comma-separated list of off and on")
    model = Path(args.cache) / "gateway-gc-model"
    if not (model / "config.json").exists():
        write_tiny_model(model, seed=0, sid_levels=LEVELS)
    catalog = random_catalog(5000, LEVELS)
    items = [json.loads(line)["item_id"] for line in catalog.open()]
    rng = random.Random(0)

    def bodies(count: int) -> list[dict]:
        return [{"history": rng.sample(items, 20), "n": args.width, "beam_width": args.width,
                 "exclude_history": False} for _ in range(count)]  # fmt: skip

    decoder = DecoderProcess(model, 4096, 200_000, "--catalog", str(catalog))
    rows = []
    try:
        decoder.wait_ready()
        for run, mode in enumerate(modes):
            report = Path(args.cache) / f"gateway-gc-{run}.json"
            report.unlink(missing_ok=True)
            proc, url = start_gateway(mode, decoder.address, args.width, report)
            try:
                asyncio.run(closed_loop(url, bodies(50), args.concurrency))  # warm-up
                parts = asyncio.run(closed_loop(url, bodies(args.requests), args.concurrency))
            finally:
                proc.terminate()
                proc.wait(timeout=60)
            passes = {int(g): p for g, p in json.loads(report.read_text()).items()}
            rows.append({
                "mode": mode, "requests": len(parts),
                "gateway_part_ms": {"p50": quantile(parts, 0.5), "p99": quantile(parts, 0.99),
                                    "max": max(parts)},
                "passes": {g: {"count": len(p), "max_ms": max(p, default=0.0),
                               "total_ms": sum(p)} for g, p in passes.items()},
            })  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        decoder.stop()
    write_json("gateway_gc", {"env": environment(), "width": args.width, "runs": rows})
    print(markdown_table(
        ["freeze", "requests", "gen2 passes", "gen2 max ms", "gen2 total ms", "gen1 max ms",
         "gateway part p50 / p99 / max ms"],
        [[r["mode"], r["requests"], r["passes"][2]["count"], r["passes"][2]["max_ms"],
          r["passes"][2]["total_ms"], r["passes"][1]["max_ms"],
          "{p50:.1f} / {p99:.1f} / {max:.1f}".format(**r["gateway_part_ms"])] for r in rows],
    ))  # fmt: skip


if __name__ == "__main__":
    main()
