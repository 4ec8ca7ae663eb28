"""Admission by predicted wait: shed a request at once when the work ahead of it (rows x decode
steps), or the rows it would run beside, would keep it past its budget, instead of admitting
it to time out.

The engine's throughput is a running estimate (`ThroughputMeter`: rows x steps per second,
seconds per step and rows per step, exponentially smoothed over engine steps, timed by an
injectable clock). A new request that fits in the free rows with nothing queued starts at the
next step; one that fits there together with every request queued ahead of it (their rows
counted too) is taken with them, a step later at most; otherwise it waits for the work ahead
(waiting and running requests' remaining rows x steps) to drain at that rate. (Rows only: a
queue that the KV cache or the prefill token budget spreads over several steps waits longer
than predicted.) Its own run takes its steps at the step time of the load it joins: a request
that starts with the rows now running (and the queue ahead) steps as fast as the recent steps
scaled down to those rows, never slower than they ran (`ThroughputMeter.step_time`: after a
burst, a lone request is not predicted at the burst's step time); one that queues, at the
recent step time. It is shed when
  - it would not run alone (other requests run or wait) and its predicted finish (wait + its
    own run), times how late recent requests finished against their predictions
    (`finish_calibration.py`), exceeds its deadline (the gRPC deadline): admitting it would
    only let it time out, in the queue or in steps slowed by the rows beside it, after holding
    rows that others could have used; or
  - the predicted wait exceeds the configured `max_queue_wait_s`.
A request that would run alone on an idle engine is never shed for its deadline: nothing it
could wait for would make it faster, and its deadline aborts it as before if its run outlasts
it.
A shed request's Retry-After is how much longer than its budget the queue ahead (or its run)
needs (at least one second, HTTP's unit). Until a step has been timed nothing is predicted and
nothing is shed.
Plain Python: no tensors, no threads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


class ThroughputMeter:
    """Rows x steps per second, seconds per step and rows per step, smoothed over the engine's
    steps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, smoothing: float = 0.2):
        if not 0 < smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        self.clock = clock
        self.smoothing = smoothing
        self.rows_steps_per_s: float | None = None
        self.step_s: float | None = None
        self.rows_per_step: float | None = None
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
        self.rows_per_step = self._smooth(self.rows_per_step, float(rows))

    def step_time(self, rows: int) -> float | None:
        """Seconds a step of `rows` rows is predicted to take: the recent step time, scaled
        down in proportion where `rows` is fewer than the recent steps ran (a step's fixed
        cost makes that an underestimate: what it errs towards is admitting), never above it.
        None until a step has been timed."""
        if self.step_s is None or self.rows_per_step is None:
            return None
        return self.step_s * min(1.0, rows / self.rows_per_step)

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
    alone: bool = False  # it would start at once with nothing else running or waiting


@dataclass(frozen=True)
class Shed:
    reason: str
    retry_after_s: int


def predict(queue: QueueState, rows: int, steps: int, meter: ThroughputMeter) -> Prediction | None:
    """None until the meter has timed a step."""
    rate, step_s = meter.rows_steps_per_s, meter.step_s
    load = queue.rows_in_use + queue.queued_rows + rows  # the rows of the step it would join
    joined_step_s = meter.step_time(load)
    if rate is None or step_s is None or joined_step_s is None:
        return None
    if load > queue.max_rows:
        wait = queue.work_ahead / rate
        return Prediction(wait, wait + steps * step_s)
    # Starts at the next step, or with the queue ahead that the next step admits.
    wait = 0.0 if queue.queued == 0 else step_s
    alone = queue.queued == 0 and queue.rows_in_use == 0
    return Prediction(wait, wait + steps * joined_step_s, alone)


def shed_decision(
    prediction: Prediction | None,
    deadline_s: float | None,  # time left to the caller's deadline (None: none)
    max_queue_wait_s: float | None,  # the decoder's own bound on a queued request's wait
    finish_factor: float = 1.0,  # how late requests finish against prediction (calibration)
) -> Shed | None:
    """The request's fate: None admits it, a Shed refuses it now."""
    if prediction is None:
        return None
    finish_s = prediction.finish_s * finish_factor
    if not prediction.alone and deadline_s is not None and finish_s > deadline_s:
        scaled = "" if finish_factor == 1.0 else (
            f", x{finish_factor:.2f}: how late recent requests finished against prediction"
        )  # fmt: skip
        return Shed(
            f"predicted to finish in {finish_s:.2f} s (queue wait {prediction.wait_s:.2f} s, "
            f"then its own steps at the current load{scaled}), past its deadline in "
            f"{deadline_s:.2f} s",
            _retry_after(finish_s - deadline_s),
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
