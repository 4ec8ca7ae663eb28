"""Redis hung (SIGSTOP: it still accepts connections, it never answers) while 60 clients poll a
batch job: `/v1/recommend`, which needs no Redis, keeps answering 200 throughout; the polls are
answered 503 (the job store gives up on a silent Redis within its timeout) rather than held;
after SIGCONT the polls answer 200 again.

Before the fix every poll held a threadpool thread on a read that never returned, and the
recommend route's synchronous dependencies (API key, state) waited for a free thread: it
stalled with Redis. Windows are bounded by counts of answers with generous hang guards."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from tests.reliability.faults_support import Tally, run_clients, stop_clients
from tests.reliability.support import GatewayApp
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import RedisServer
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

POLLERS = 60  # more than the threadpool's 40 threads
RECOMMENDERS = 2
HANG_GUARD_S = 120.0
REC_BODY = {"history": ["item-3", "item-17"], "n": 2, "beam_width": 2}


@pytest.fixture
def gateway(own_redis: RedisServer, rel_decoder: BackgroundServer) -> Iterator[GatewayApp]:
    # Kept-alive connections stay open past any pause of a starved client thread (62 of them
    # share the test process with the gateway): a close racing the next poll would read as a
    # ReadError, which says nothing about Redis.
    settings = gateway_settings(
        [rel_decoder.address], redis_url=own_redis.url, keep_alive_timeout_s=HANG_GUARD_S
    )
    with GatewayApp(settings) as app:
        yield app


def answered(tally: Tally, after: float, before: float = float("inf")) -> list[str]:
    """Outcomes of the calls sent at or after `after` that ended before `before`."""
    return [out for sent, out, lat in tally.calls if sent >= after and sent + lat < before]


def test_a_hung_redis_stalls_neither_recommend_nor_the_polls(
    gateway: GatewayApp, own_redis: RedisServer
) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        submitted = http.post("/v1/batch-jobs", json={"requests": [REC_BODY]})
        assert submitted.status_code == 202, submitted.text
        job_url = f"{gateway.url}/v1/batch-jobs/{submitted.json()['id']}"
    polls, recs = Tally(), Tally()
    pollers, stop_polls = run_clients(
        POLLERS, url=job_url, body=None, tally=polls, pause=0.2, timeout=HANG_GUARD_S
    )
    recommenders, stop_recs = run_clients(
        RECOMMENDERS, url=f"{gateway.url}/v1/recommend", body=REC_BODY, tally=recs,
        pause=0.05, timeout=HANG_GUARD_S,
    )  # fmt: skip
    assert own_redis.proc is not None
    pid = own_redis.proc.pid
    stopped = resumed = None
    try:
        began = time.monotonic()
        assert polls.wait_for_answers(POLLERS, began, HANG_GUARD_S) >= POLLERS
        assert recs.wait_for_answers(RECOMMENDERS, began, HANG_GUARD_S) >= RECOMMENDERS

        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        # Every poller answered twice over, and recommend answered all the while.
        polls.wait_for_answers(2 * POLLERS, stopped, HANG_GUARD_S)
        recs.wait_for_answers(50, stopped, HANG_GUARD_S)
        os.kill(pid, signal.SIGCONT)
        resumed = time.monotonic()

        polls.wait_for_answers(2 * POLLERS, resumed, HANG_GUARD_S)
    finally:
        if stopped is not None and resumed is None:
            os.kill(pid, signal.SIGCONT)
        stop_clients(pollers, stop_polls)
        stop_clients(recommenders, stop_recs)

    polls_during = answered(polls, stopped, resumed)
    recs_during = answered(recs, stopped, resumed)
    during = [lat for sent, _, lat in polls.calls if sent >= stopped and sent + lat < resumed]
    rec_latency = [lat for sent, _, lat in recs.calls if stopped <= sent < resumed]
    print(
        f"\nredis SIGSTOPped {resumed - stopped:.1f} s under {POLLERS} pollers: polls answered "
        f"meanwhile {dict(Counter(polls_during))}, slowest {max(during, default=0):.2f} s; "
        f"recommend answered {len(recs_during)} ({set(recs_during)}), slowest "
        f"{max(rec_latency, default=0):.2f} s; polls after SIGCONT {dict(polls.counts(resumed))}"
    )
    assert len(recs_during) >= 50 and set(recs_during) == {"200"}, recs.counts(stopped)
    assert set(recs.counts()) == {"200"}, recs.counts()
    assert len(polls_during) >= 2 * POLLERS and set(polls_during) == {"503"}, polls_during[:20]
    # Back after SIGCONT: the last answer of every poller is a 200.
    after = sorted((sent + lat, out) for sent, out, lat in polls.calls if sent >= resumed)
    assert len(after) >= 2 * POLLERS, polls.counts(resumed)
    assert {out for _, out in after[-POLLERS:]} == {"200"}, polls.counts(resumed)
