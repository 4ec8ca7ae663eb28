"""Closed and open loop against a real server: counts, rates, latency from the due time, and
requests that get no answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.widebeam.loadgen.http_server import HttpTestServer
from widebeam.loadgen.drivers import Sender, closed_loop, open_loop
from widebeam.loadgen.http_client import HttpClient
from widebeam.loadgen.outcomes import Outcome
from widebeam.loadgen.traffic import Call

Drive = Callable[[Sender, list[Call]], Awaitable[float]]


def run(path: str, drive: Drive, timeout_s: float = 10.0) -> tuple[list[Outcome], float, int]:
    async def scenario() -> tuple[list[Outcome], float, int]:
        async with HttpTestServer() as server:
            client = HttpClient(server.url)
            sender = Sender(client, timeout_s=timeout_s)
            elapsed = await drive(sender, [Call.of("probe", path, {"x": 1})])
            await client.close()
            return sender.outcomes, elapsed, server.requests

    return asyncio.run(scenario())


def test_closed_loop_stops_after_max_requests() -> None:
    outcomes, elapsed, served = run("/ok", lambda s, c: closed_loop(s, c, 4, 30, 50))
    assert len(outcomes) == served == 50 and elapsed < 60  # a hang guard
    assert {o.status for o in outcomes} == {200}
    # {"ok": true} is no recommendation: the check says so rather than passing it.
    assert all(o.problem == "no check for /ok" for o in outcomes)


def test_open_loop_keeps_its_rate_whatever_the_answers_take() -> None:
    outcomes, elapsed, _ = run("/slow", lambda s, c: open_loop(s, c, rate=100, duration_s=1.0))
    # Poisson arrivals: 100 expected, 3 standard deviations either side. Sending took the
    # schedule's second, not the ~30 s that waiting for each 0.3 s answer would (the slack is a
    # busy machine's).
    assert 70 <= len(outcomes) <= 130 and 1.0 <= elapsed < 10
    assert all(o.status == 200 and o.latency >= 0.3 for o in outcomes)
    assert max(o.sent for o in outcomes) < 1.0


def test_requests_without_an_answer_are_recorded() -> None:
    dropped, _, _ = run("/drop", lambda s, c: closed_loop(s, c, 1, 30, 3))
    assert [(o.status, o.problem) for o in dropped] == [(0, "no answer: IncompleteReadError")] * 3
    late, _, _ = run("/slow", lambda s, c: closed_loop(s, c, 1, 30, 1), timeout_s=0.05)
    assert [(o.status, o.problem) for o in late] == [(0, "timeout")]
