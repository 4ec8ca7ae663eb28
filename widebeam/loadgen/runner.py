"""A load run: warm-up, then either

- `overload`: measure capacity (closed loop, `concurrency` clients for `capacity_s`), then send
  open loop at `factor` x that rate (or at `rate`) for `duration_s`;
- `closed`: a closed loop of `concurrency` clients for `duration_s` or `requests` requests.

With `watch_pid` the resident memory of that process (e.g. the decoder) is read when the main
phase starts and ends."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from widebeam.loadgen.drivers import Sender, closed_loop, open_loop
from widebeam.loadgen.http_client import HttpClient
from widebeam.loadgen.outcomes import PhaseSummary, summarize
from widebeam.loadgen.proc_rss import rss_bytes
from widebeam.loadgen.traffic import TrafficSpec, build_cycle

Drive = Callable[[Sender], Awaitable[float]]  # runs a phase's requests; returns its length


@dataclass(frozen=True)
class LoadConfig:
    url: str
    traffic: TrafficSpec
    mode: Literal["overload", "closed"] = "overload"
    concurrency: int = 32  # closed-loop clients (capacity phase, closed mode)
    capacity_s: float = 5.0
    factor: float = 2.0  # overload: open-loop rate = factor x measured capacity
    rate: float | None = None  # overload: this rate instead (no capacity phase)
    duration_s: float = 60.0
    requests: int | None = None  # closed mode: stop after this many
    warmup_requests: int = 20
    timeout_s: float = 60.0  # per request, client side
    max_connections: int = 4096
    ready_timeout_s: float = 30.0  # wait this long for GET /readyz -> 200 before starting
    api_key: str | None = None
    watch_pid: int | None = None


@dataclass
class LoadReport:
    config: dict[str, Any]
    phases: list[PhaseSummary] = field(default_factory=list)
    capacity: float | None = None  # requests per second, closed loop
    rss_start_bytes: int | None = None
    rss_end_bytes: int | None = None
    main_requests: int = 0  # requests of the main phase (the RSS window)

    def phase(self, name: str) -> PhaseSummary:
        return next(p for p in self.phases if p.name == name)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["phases"] = [p.as_dict() for p in self.phases]
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)


async def wait_ready(client: HttpClient, timeout_s: float) -> None:
    """Until `GET /readyz` answers 200 (a decoder serves a catalog); ValueError after
    `timeout_s`, so a run never starts against a stack that is still loading."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            response = await client.get("/readyz")
            if response.status == 200:
                return
            last = f"{response.status} {response.body[:200]!r}"
        except (OSError, EOFError) as exc:  # refused, reset, closed mid-answer
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            raise ValueError(f"the gateway is not ready after {timeout_s:g} s ({last})")
        await asyncio.sleep(0.2)


async def model_name(client: HttpClient) -> str:
    """The served model's id (`GET /v1/models`), needed by completions and chat."""
    response = await client.get("/v1/models")
    if response.status != 200:
        raise ValueError(f"GET /v1/models answered {response.status}: {response.body[:200]!r}")
    return str(json.loads(response.body)["data"][0]["id"])


async def run(config: LoadConfig) -> LoadReport:
    client = HttpClient(config.url, config.max_connections, config.api_key)
    try:
        return await _run(config, client)
    finally:
        await client.close()


async def _run(config: LoadConfig, client: HttpClient) -> LoadReport:
    await wait_ready(client, config.ready_timeout_s)
    spec = config.traffic
    if spec.mixed and spec.model is None:
        spec = replace(spec, model=await model_name(client))
    calls = build_cycle(spec)
    items = frozenset(spec.items)
    report = LoadReport(config=_describe(config))

    async def phase(name: str, drive: Drive, target: float | None = None) -> PhaseSummary:
        sender = Sender(client, items, config.timeout_s)
        elapsed = await drive(sender)
        summary = summarize(name, sender.outcomes, elapsed, target)
        report.phases.append(summary)
        return summary

    n_warm = config.warmup_requests
    await phase("warmup", lambda s: closed_loop(s, calls, min(4, n_warm), 120, n_warm))
    if config.mode == "overload" and config.rate is None:
        measured = await phase(
            "capacity", lambda s: closed_loop(s, calls, config.concurrency, config.capacity_s)
        )
        report.capacity = measured.throughput
    report.rss_start_bytes = _rss(config.watch_pid)
    if config.mode == "overload":
        rate = config.rate or config.factor * (report.capacity or 0.0)
        main = await phase("overload", lambda s: open_loop(s, calls, rate, config.duration_s), rate)
    else:
        main = await phase(
            "closed",
            lambda s: closed_loop(s, calls, config.concurrency, config.duration_s, config.requests),
        )
    report.main_requests = main.sent
    report.rss_end_bytes = _rss(config.watch_pid)
    return report


def _rss(pid: int | None) -> int | None:
    return None if pid is None else rss_bytes(pid)


def _describe(config: LoadConfig) -> dict[str, Any]:
    described = asdict(config)
    described["traffic"]["items"] = len(config.traffic.items)
    described.pop("api_key")
    described["started"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    return described


def run_sync(config: LoadConfig) -> LoadReport:
    return asyncio.run(run(config))
