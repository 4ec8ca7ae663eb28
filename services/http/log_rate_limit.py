"""A log rate limit, so a flood of bad connections cannot grow the log without bound.

`LogRateLimit` is a `logging.Filter` for handlers: of the records of one kind (same logger,
level and first line of the message template, so records differing only in their arguments,
such as a client address, are one kind) it lets `per_interval` through in each `interval_s`
and counts the rest. The first record of a kind let through after some were dropped says how
many; kinds that do not come back are reported in one summary line at the next sweep (each
`interval_s`), which also forgets them. At most `max_kinds` kinds are tracked; beyond that, new
kinds of a logger share one count. `install_log_rate_limit` puts one limit on every handler
configured so far (the root's and uvicorn's own). Access-log lines of requests answered below
400 are never limited: they are one per request served, the service's work; the errors a flood
of bad requests leaves (4xx, 5xx) are."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

SUMMARY_LOGGER = "widebeam.http.log_rate_limit"
ACCESS_LOGGER = "uvicorn.access"
_OTHER_KINDS = "<other messages>"
_VERDICT = "widebeam_rate_limit_verdict"  # set on a record once judged (several handlers)

Kind = tuple[str, int, str]  # logger name, level, first line of the message template


@dataclass
class _Window:
    started: float
    passed: int = 0
    dropped: int = 0


class LogRateLimit(logging.Filter):
    def __init__(
        self,
        per_interval: int,
        interval_s: float,
        max_kinds: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        if per_interval < 1 or interval_s <= 0 or max_kinds < 1:
            raise ValueError("per_interval >= 1, interval_s > 0 and max_kinds >= 1 are needed")
        self.per_interval = per_interval
        self.interval_s = interval_s
        self.max_kinds = max_kinds
        self.dropped_total = 0
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[Kind, _Window] = {}
        self._next_sweep = clock() + interval_s

    def filter(self, record: logging.LogRecord) -> bool:
        verdict = getattr(record, _VERDICT, None)
        if verdict is not None:  # judged already by another handler with this limit
            return bool(verdict)
        with self._lock:
            now = self._clock()
            verdict = self._judge(record, now)  # first: a kind that is back is noted on it
            forgotten = self._sweep(now) if now >= self._next_sweep else []
        setattr(record, _VERDICT, verdict)
        if forgotten:  # logged outside the lock: the summary passes this filter too
            _log_summary(forgotten, self.interval_s)
        return verdict

    def _judge(self, record: logging.LogRecord, now: float) -> bool:
        if record.name == SUMMARY_LOGGER or _is_served_request(record):
            return True
        kind = self._kind(record)
        window = self._windows.get(kind)
        if window is None or now - window.started >= self.interval_s:
            dropped = window.dropped if window is not None else 0
            window = self._windows[kind] = _Window(started=now)
            if dropped:
                _note_dropped(record, dropped, self.interval_s)
        if window.passed < self.per_interval:
            window.passed += 1
            return True
        window.dropped += 1
        self.dropped_total += 1
        return False

    def _kind(self, record: logging.LogRecord) -> Kind:
        first_line = str(record.msg).split("\n", 1)[0][:200]
        kind = (record.name, record.levelno, first_line)
        if kind not in self._windows and len(self._windows) >= self.max_kinds:
            return (record.name, record.levelno, _OTHER_KINDS)
        return kind

    def _sweep(self, now: float) -> list[tuple[Kind, int]]:
        """Forget the kinds whose window has ended; returns those that had records dropped."""
        self._next_sweep = now + self.interval_s
        ended = [k for k, w in self._windows.items() if now - w.started >= self.interval_s]
        return [(k, w.dropped) for k in ended if (w := self._windows.pop(k)).dropped]


def _is_served_request(record: logging.LogRecord) -> bool:
    """An access-log line of a request answered below 400: the service's work, one line per
    request it chose to serve, never limited (an access log that drops them is no log)."""
    if record.name != ACCESS_LOGGER or not isinstance(record.args, tuple) or not record.args:
        return False
    status = record.args[-1]  # uvicorn's access line: client, method, path, version, status
    return isinstance(status, int) and status < 400


def _note_dropped(record: logging.LogRecord, dropped: int, interval_s: float) -> None:
    """Append the count of dropped records of its kind to `record`'s message."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string is the handler's to report, not ours
        return
    record.msg = f"{message} [{dropped} more like this dropped in {interval_s:g}s]"
    record.args = None


def _log_summary(forgotten: list[tuple[Kind, int]], interval_s: float) -> None:
    shown = "; ".join(f"{n} x {name}: {line!r}" for (name, _, line), n in forgotten[:20])
    logging.getLogger(SUMMARY_LOGGER).warning(
        "log rate limit: records dropped in the last %gs: %s%s",
        interval_s,
        shown,
        f" (and {len(forgotten) - 20} more kinds)" if len(forgotten) > 20 else "",
    )


def install_log_rate_limit(per_interval: int, interval_s: float) -> LogRateLimit:
    """One `LogRateLimit` on every handler configured so far; call it after logging (and
    uvicorn's `Config`, which sets up uvicorn's handlers) is configured."""
    limit = LogRateLimit(per_interval, interval_s)
    loggers = [logging.getLogger()] + [
        logger for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]  # fmt: skip
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, LogRateLimit) for f in handler.filters):
                handler.addFilter(limit)
    return limit
