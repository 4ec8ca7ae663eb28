"""Admission by predicted wait: shed a request at once when the work queued ahead of it
(rows x decode steps) would keep it past its budget, instead of admitting it to time out.

The engine's throughput is a running estimate (`ThroughputMeter`: rows x steps per second and
seconds per step, exponentially smoothed over engine steps, timed by an injectable clock). A
new request that fits in the free rows with nothing queued starts at the next step; one that
fits there together with every request queued ahead of it (their rows counted too) is taken
with them, a step later at most; otherwise it waits for the work ahead (waiting and running
requests' remaining rows x steps) to drain at that rate. (Rows only: a queue that the KV cache
or the prefill token budget spreads over several steps waits longer than predicted.) Its own
run takes its steps at the current step time. It is shed when
  - it would queue and its predicted finish (wait + its own steps) exceeds its deadline (the
    gRPC deadline): admitting it would only let it time out in the queue, or
  - the predicted wait exceeds the configured `max_queue_wait_s`.
A request that starts at once is never shed for its deadline: it runs, and the deadline aborts
it as before if its own run outlasts it (nothing else waits for its rows meanwhile).
A shed request's Retry-After is how much longer the queue ahead needs to drain to make it fit
(at least one second, HTTP's unit). Until a step has been timed nothing is predicted and
nothing is shed.
Plain Python: no tensors, no threads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


class ThroughputMeter:
    """Rows x steps per second and seconds per step, smoothed over the engine's steps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, smoothing: float = 0.2):
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.clock = clock
        self.smoothing = smoothing
        self.rows_steps_per_s: float | None = None
        self.step_s: float | None = None
        self._started: float | None = None

    def step_started(self) -> None:
        self._started = self.clock()

    def step_finished(self, rows: int) -> None:
        """`rows`: the rows the step advanced (0: an idle or prefill-free step, not measured)."""
        if self._started is None:
            raise RuntimeError("step_finished without step_started")
        seconds, self._started = self.clock() - self._started, None
        if rows <= 0 or seconds <= 0:
            return
        self.rows_steps_per_s = self._smooth(self.rows_steps_per_s, rows / seconds)
        self.step_s = self._smooth(self.step_s, seconds)

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.smoothing * (new - old)


@dataclass(frozen=True)
class Backlog:
    """Requests accepted and not yet admitted to rows, as admission weighs them."""

    rows: int = 0
    work: int = 0  # rows x steps

    def __add__(self, other: Backlog) -> Backlog:
        return Backlog(self.rows + other.rows, self.work + other.work)

    def __sub__(self, other: Backlog) -> Backlog:
        return Backlog(max(0, self.rows - other.rows), max(0, self.work - other.work))


@dataclass(frozen=True)
class QueueState:
    """What is ahead of a new request."""

    work_ahead: int  # rows x steps still to run: waiting (queued) and running requests
    queued: int  # requests accepted and not yet admitted to rows
    queued_rows: int  # their rows
    rows_in_use: int
    max_rows: int


@dataclass(frozen=True)
class Prediction:
    wait_s: float  # until its first step
    finish_s: float  # until its last


@dataclass(frozen=True)
class Shed:
    reason: str
    retry_after_s: int


def predict(queue: QueueState, rows: int, steps: int, meter: ThroughputMeter) -> Prediction | None:
    """None until the meter has timed a step."""
    rate, step_s = meter.rows_steps_per_s, meter.step_s
    if rate is None or step_s is None:
        return None
    if queue.rows_in_use + queue.queued_rows + rows > queue.max_rows:
        wait = queue.work_ahead / rate
    else:  # starts at the next step, or with the queue ahead that the next step admits
        wait = 0.0 if queue.queued == 0 else step_s
    return Prediction(wait, wait + steps * step_s)


def shed_decision(
    prediction: Prediction | None,
    deadline_s: float | None,  # time left to the caller's deadline (None: none)
    max_queue_wait_s: float | None,  # the decoder's own bound on a queued request's wait
) -> Shed | None:
    """The request's fate: None admits it, a Shed refuses it now."""
    if prediction is None:
        return None
    queued = prediction.wait_s > 0
    if queued and deadline_s is not None and prediction.finish_s > deadline_s:
        return Shed(
            f"predicted to finish in {prediction.finish_s:.2f} s (queue wait "
            f"{prediction.wait_s:.2f} s), past its deadline in {deadline_s:.2f} s",
            _retry_after(prediction.finish_s - deadline_s),
        )
    if max_queue_wait_s is not None and prediction.wait_s > max_queue_wait_s:
        return Shed(
            f"predicted queue wait {prediction.wait_s:.2f} s exceeds this decoder's "
            f"max_queue_wait_s ({max_queue_wait_s:g} s)",
            _retry_after(prediction.wait_s - max_queue_wait_s),
        )
    return None


def retry_after(prediction: Prediction | None) -> int | None:
    """Retry-After for a request refused for another reason (a full queue): its wait."""
    return None if prediction is None else _retry_after(prediction.wait_s)


def _retry_after(seconds: float) -> int:
    return max(1, math.ceil(seconds))
