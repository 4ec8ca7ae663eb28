"""`LogRateLimit` on a real logging handler: per kind of record, `per_interval` lines per window;
the rest counted, then reported."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from widebeam.services.http.log_rate_limit import SUMMARY_LOGGER, LogRateLimit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limit(clock: Clock) -> LogRateLimit:
    return LogRateLimit(per_interval=3, interval_s=60, max_kinds=4, clock=clock)


@pytest.fixture
def out(limit: LogRateLimit) -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(limit)
    loggers = [logging.getLogger(n) for n in ("test.flood", SUMMARY_LOGGER, "uvicorn.access")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)
        logger.propagate = True


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_one_kind_is_limited_whatever_its_arguments(out: io.StringIO, limit: LogRateLimit) -> None:
    log = logging.getLogger("test.flood")
    for i in range(100):
        log.warning("%s: refused a connection", f"10.0.0.{i}")
    assert lines(out) == [f"10.0.0.{i}: refused a connection" for i in range(3)]
    assert limit.dropped_total == 97
    log.error("%s: refused a connection", "10.0.0.1")  # another level is another kind
    assert len(lines(out)) == 4


def test_the_next_window_says_how_many_were_dropped(
    out: io.StringIO, limit: LogRateLimit, clock: Clock
) -> None:
    log = logging.getLogger("test.flood")
    for _ in range(10):
        log.info("bad request from %s", "x")
    clock.now += 60
    log.info("bad request from %s", "y")
    assert lines(out)[-1] == "bad request from y [7 more like this dropped in 60s]"


def test_kinds_that_stop_are_summarised_at_the_sweep(
    out: io.StringIO, limit: LogRateLimit, clock: Clock
) -> None:
    log = logging.getLogger("test.flood")
    for _ in range(5):
        log.info("head timed out")
    clock.now += 61
    log.info("something else")
    summary, last = lines(out)[-2:]
    assert summary.startswith("log rate limit: records dropped in the last 60s: 2 x test.flood")
    assert "'head timed out'" in summary and last == "something else"


def test_many_kinds_share_one_count_beyond_max_kinds(out: io.StringIO) -> None:
    log = logging.getLogger("test.flood")
    for i in range(50):
        log.info(f"message number {i}")  # each its own kind, on purpose
    assert len(lines(out)) == 4 + 3  # 4 kinds tracked, then the shared overflow kind


def test_served_requests_in_the_access_log_are_never_limited(out: io.StringIO) -> None:
    access = logging.getLogger("uvicorn.access")
    for _ in range(20):
        access.info('%s - "%s %s HTTP/%s" %d', "c", "GET", "/healthz", "1.1", 200)
    for _ in range(20):
        access.info('%s - "%s %s HTTP/%s" %d', "c", "POST", "/v1/x", "1.1", 401)
    assert len(lines(out)) == 20 + 3


def test_a_record_judged_by_two_handlers_counts_once(limit: LogRateLimit) -> None:
    streams = [io.StringIO(), io.StringIO()]
    logger = logging.getLogger("test.two_handlers")
    logger.propagate = False
    handlers = [logging.StreamHandler(s) for s in streams]
    for handler in handlers:
        handler.addFilter(limit)
        logger.addHandler(handler)
    try:
        for _ in range(3):
            logger.warning("same")
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
    assert [s.getvalue().count("same") for s in streams] == [3, 3]
    assert limit.dropped_total == 0
