"""What the REST bench's HTTP client costs a request: `httpx.AsyncClient` (the closed-loop
clients' and the sweep's) against a bare keep-alive HTTP/1.1 exchange on an asyncio stream,
one request at a time on one connection, to the gateway's cheapest route (`GET /v1/models`):
the difference is the client's own host time, which a closed loop adds to every request's
latency (and so takes from its rate at a fixed concurrency). A real gateway in front of a
real decoder (the tiny SID model on the CPU; the route never reaches the decoder), the two
clients alternated `--rounds` times.

    python bench/http_client_cost.py [--requests 1500] [--rounds 2] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import httpx
from cache_dir import add_cache_argument
from catalogs import random_catalog
from e2e import DecoderProcess
from harness import environment, markdown_table, write_json
from replicas import GatewayProcess
from stack import SMOKE_LEVELS, smoke_model

ROUTE = "/v1/models"


async def with_httpx(url: str, requests: int) -> list[float]:
    """Seconds per request through `httpx.AsyncClient`, its JSON body parsed."""
    latencies = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(requests):
            started = time.perf_counter()
            response = await client.get(ROUTE)
            response.raise_for_status()
            response.json()
            latencies.append(time.perf_counter() - started)
    return latencies


async def with_stream(url: str, requests: int) -> list[float]:
    """Seconds per request written and read by hand on one keep-alive connection."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    request = f"GET {ROUTE} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    latencies = []
    try:
        for _ in range(requests):
            started = time.perf_counter()
            writer.write(request)
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            if not head[0].startswith("HTTP/1.1 200"):
                raise RuntimeError(f"{ROUTE} answered {head[0]!r}")
            fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
            length = int({k.lower(): v for k, v in fields.items()}["content-length"])
            json.loads(await reader.readexactly(length))
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="per client and round")
    parser.add_argument("--rounds", type=int, default=2, help="each client once a round")
    add_cache_argument(parser)
    parser.add_argument("--smoke", action="store_true", help="a few requests, one round")
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.rounds = 20, 1
    if min(args.requests, args.rounds) < 1:
        parser.error("--requests and --rounds must be >= 1")
    model = smoke_model(args.cache)
    decoder = DecoderProcess(
        model, 256, 16384, "--catalog", str(random_catalog(400, SMOKE_LEVELS)),
        env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    gateway = None
    runs: dict[str, list[float]] = {"httpx": [], "stream": []}
    try:
        decoder.wait_ready()
        gateway = GatewayProcess([decoder.address], 8)
        gateway.wait_ready()
        for _ in range(args.rounds):
            for name, client in (("httpx", with_httpx), ("stream", with_stream)):
                latencies = asyncio.run(client(gateway.url, args.requests))
                runs[name].append(1000 * statistics.median(latencies))
    finally:
        if gateway is not None:
            gateway.stop()
        decoder.stop()
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(markdown_table(
        ["client", "p50 ms a request, each round", "median", "over the bare stream"],
        [[name, " ".join(f"{v:.3f}" for v in values), f"{medians[name]:.3f}",
          f"{medians[name] - medians['stream']:+.3f}"] for name, values in runs.items()],
    ))  # fmt: skip
    write_json("http_client_cost", {"env": environment(), "args": vars(args), "p50_ms": runs})


if __name__ == "__main__":
    main()
