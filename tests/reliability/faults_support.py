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

    def wait_for_answers(self, count: int, since: float, timeout: float) -> int:
        """Until `count` calls sent at or after `since` have ended (calls are tallied as they
        end), or `timeout` s passed; returns how many there are. Windows bounded by counts, not
        by seconds, keep a scenario's verdict independent of the machine's speed."""
        deadline = time.monotonic() + timeout
        while (seen := sum(self.counts(since).values())) < count:
            if time.monotonic() > deadline:
                return seen
            time.sleep(0.05)
        return seen

    def max_latency(self) -> float:
        return max((lat for _, _, lat in self.calls), default=0.0)

    def outage(self, down: float, until: float) -> tuple[int, float | None]:
        """Failures of a stop at `down`: calls not answered 200 that were in flight at `down` or
        sent after it, before `until`; and the seconds from `down` until the first 200 sent
        after the last of them ended (0.0: none failed; None: no 200 came after them)."""
        failed = [s for s, out, lat in self.calls if out != "200" and s + lat >= down and s < until]
        if not failed:
            return 0, 0.0
        last = max(failed)
        ends = [s + lat for s, out, lat in self.calls if out == "200" and s > last]
        return len(failed), (min(ends) - down if ends else None)


def drive(
    url: str, body: dict[str, Any] | None, tally: Tally, stop: threading.Event,
    check: Any = None, timeout: float = 30.0, pause: float = 0.0,
) -> None:  # fmt: skip
    """POST `body` (GET when None) to `url` in a loop until `stop`, `pause` s apart;
    `check(response)` vets every 200."""
    with httpx.Client(timeout=timeout) as http:
        while not stop.wait(pause):
            sent = time.monotonic()
            try:
                response = http.post(url, json=body) if body is not None else http.get(url)
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
