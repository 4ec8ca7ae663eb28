"""Helpers of the fault scenarios: client threads that tally answers, a redis-server that keeps
its data over a restart."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis

from tests.support.redis_server import RedisServer


@dataclass
class Tally:
    """What the client threads saw: (sent-at, status or exception name, latency) per request."""

    calls: list[tuple[float, str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sent: float, outcome: str, latency: float) -> None:
        with self.lock:
            self.calls.append((sent, outcome, latency))

    def counts(self, since: float = 0.0) -> Counter[str]:
        return Counter(outcome for sent, outcome, _ in self.calls if sent >= since)

    def max_latency(self) -> float:
        return max((lat for _, _, lat in self.calls), default=0.0)


def drive(
    url: str, body: dict[str, Any], tally: Tally, stop: threading.Event,
    check: Any = None, timeout: float = 30.0,
) -> None:  # fmt: skip
    """POST `body` to `url` in a loop until `stop`; `check(response)` vets every 200."""
    with httpx.Client(timeout=timeout) as http:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                response = http.post(url, json=body)
                outcome = str(response.status_code)
                if response.status_code == 200 and check is not None and not check(response):
                    outcome = "wrong"
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
                time.sleep(0.05)  # a refused connection returns at once: do not spin
            tally.add(sent, outcome, time.monotonic() - sent)


def run_clients(threads: int, **kwargs: Any) -> tuple[list[threading.Thread], threading.Event]:
    stop = threading.Event()
    workers = [
        threading.Thread(target=drive, kwargs={**kwargs, "stop": stop}, daemon=True)
        for _ in range(threads)
    ]
    for t in workers:
        t.start()
    return workers, stop


def stop_clients(workers: list[threading.Thread], stop: threading.Event) -> None:
    stop.set()
    for t in workers:
        t.join(60)


def stop_keeping_data(server: RedisServer) -> None:
    """SHUTDOWN SAVE: the snapshot is written and the server exits atomically (no write lands
    between the two); `server.start()` brings it back on the same port with that data."""
    # The server closes the connection as it exits.
    with redis.Redis.from_url(server.url) as client, contextlib.suppress(redis.ConnectionError):
        client.shutdown(save=True)
    server.stop()  # reaps the exited process


def restart_keeping_data(server: RedisServer, down_s: float = 0.0) -> float:
    """Stop and start redis-server on the same port with its data, `down_s` apart: an
    operator's restart, not a crash. Returns how long Redis was down."""
    began = time.monotonic()
    stop_keeping_data(server)
    time.sleep(down_s)
    server.start()
    return time.monotonic() - began
