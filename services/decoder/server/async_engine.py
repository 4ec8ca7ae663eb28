"""Run the engine on its own thread and expose it to asyncio.

`Engine.step()` is blocking tensor work, so it never runs on the event loop. Everything that
touches the engine — submissions, aborts, catalog swaps, steps — happens on one thread, so the
engine needs no locks: callers hand work over through queues guarded by one condition variable,
and results come back by resolving asyncio futures with `loop.call_soon_threadsafe`. The thread
sleeps on the condition when it has nothing to do. What arrives while a step runs joins that
same step: `Engine.step` calls back (`_intake`) right before admission (while the device still
runs the previous step's selection, and again after its flags when nothing was admitted then),
and the thread submits the inbox there instead of at the next step's start.

Two opt-in policies for closed-loop callers, whose next requests follow their answers by a
network round trip (off by default until the H200 shows them: docs/benchmarks.md, sixteenth
session). `answers_at_step_start`: answers leave during the step that read their flags
(`Engine.step`'s `deliver`: once its decode is launched, before its selection), instead of
when it returns, so the next requests can arrive before the next step's first intake.
`group_wait_s`: after k answers left together, the next intake waits (at most that long, once
per group) until k requests have arrived since, so a group's next requests are admitted
together instead of some joining a step later; the waits are counted in the engine's
`StepCounts`.

Admission by predicted wait (`scheduler/wait_prediction.py`): the engine thread times its steps;
`generate` refuses at once (Overloaded, with a Retry-After from the queue) a request that would
not run alone (others run or wait) and whose predicted finish, at the load it joins and times
how late recent requests finished against their predictions (`FinishCalibration`, fed here with
each admitted request's time), is past its timeout, or whose predicted queue wait exceeds
`max_queue_wait_s`.

Device timelines (`timeline_recorder.py`): `toggle_timeline` starts or stops one; the engine
thread applies it between steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.scheduler.finish_calibration import FinishCalibration
from widebeam.services.decoder.scheduler.wait_prediction import (
    Backlog,
    Prediction,
    QueueState,
    ThroughputMeter,
    predict,
    retry_after,
    shed_decision,
)
from widebeam.services.decoder.server.async_types import (
    EngineFailure,
    EngineLoad,
    Overloaded,
    Prepare,
    RequestWork,
    ShuttingDown,
)
from widebeam.services.decoder.server.served_catalog import ServedCatalog
from widebeam.services.decoder.server.timeline_recorder import TimelineRecorder
from widebeam.services.decoder.server.version_reaper import VersionReaper

log = logging.getLogger(__name__)


@dataclass
class _Job:
    rid: str
    prepare: Prepare
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[RequestOutput]
    work: Backlog  # counted as queued until the engine holds (or refuses) it
    arrived: float  # time.monotonic() of the call


class AsyncEngine:
    def __init__(
        self,
        engine: Engine,
        max_waiting: int,
        max_queue_wait_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeline: TimelineRecorder | None = None,
        answers_at_step_start: bool = False,
        group_wait_s: float = 0.0,
        calibration: FinishCalibration | None = None,
        request_clock: Callable[[], float] = time.monotonic,  # times requests for calibration
    ) -> None:
        if not 0 <= group_wait_s < float("inf"):  # (NaN fails too)
            raise ValueError("group_wait_s must be a finite number >= 0")
        self.engine = engine
        self.timeline = timeline  # device timelines on request, started between steps
        self.max_waiting = max_waiting
        self.max_queue_wait_s = max_queue_wait_s
        self.answers_at_step_start = answers_at_step_start
        self.group_wait_s = group_wait_s
        # Answers of the last group that left, and requests arrived since (under the lock).
        self._group_answers = self._arrived_since_answers = 0
        self.meter = ThroughputMeter(clock)  # written by the engine thread only
        # How late requests finish against prediction: fed by callers, read by the deadline rule.
        self.calibration = FinishCalibration() if calibration is None else calibration
        self._request_clock = request_clock
        self._cond = threading.Condition()
        self._inbox: list[_Job] = []
        self._aborts: list[str] = []
        self._swaps: list[tuple[str, ServedCatalog | None]] = []
        self._in_transit = 0  # jobs taken from the inbox, not yet counted by the scheduler
        # The rows and rows x steps of the inbox's jobs, and of those in transit
        self._inbox_backlog = self._in_transit_backlog = Backlog()
        self._engine_waiting = 0
        self._stopping = False
        self._swaps_requested = self._swaps_applied = 0
        self._jobs: dict[str, _Job] = {}  # submitted to the engine; engine thread only
        self._served: dict[str, ServedCatalog] = {}  # engine thread writes, others copy
        # replaced versions are freed there, not by whichever engine step drops them last
        self.reaper = VersionReaper()
        self._load = EngineLoad(kv_slots_free=engine.stats().kv_slots_free)
        self._ids = itertools.count()
        self.step_failures = 0
        for name, constraint in engine.catalogs.items():
            self._served[name] = ServedCatalog.from_constraint(name, constraint)
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    # ----- any thread -------------------------------------------------------------------------
    def start(self) -> AsyncEngine:
        self.reaper.start()
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Fail whatever is still pending with ShuttingDown and join the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        self.reaper.stop(timeout)

    def swap_catalog(self, name: str, served: ServedCatalog | None) -> None:
        """Make `served` current for new admissions (None drops the catalog); applied between
        steps on the engine thread. Admitted requests keep the version they pinned."""
        with self._cond:
            self._swaps.append((name, served))
            self._swaps_requested += 1
            self._cond.notify_all()

    def wait_for_swaps(self, timeout: float) -> bool:
        """Block until every swap requested so far is applied; False on timeout."""
        with self._cond:
            target = self._swaps_requested
            return self._cond.wait_for(lambda: self._swaps_applied >= target, timeout)

    def catalogs(self) -> dict[str, ServedCatalog]:
        with self._cond:
            return dict(self._served)

    def load(self) -> EngineLoad:
        with self._cond:
            return self._load

    def abort(self, rid: str) -> None:
        with self._cond:
            self._aborts.append(rid)
            self._cond.notify_all()

    def toggle_timeline(self) -> None:
        """Start a device timeline, or stop the running one and write it (`timeline`)."""
        if self.timeline is None:
            raise RuntimeError("no timeline recorder (the decoder's profile_dir is not set)")
        with self._cond:
            self.timeline.toggle()
            self._cond.notify_all()

    # ----- event loop -------------------------------------------------------------------------
    async def generate(
        self,
        request: GenerationRequest | Prepare,
        timeout: float | None = None,
        work: RequestWork | None = None,  # a Prepare's rows and steps (a request's are read)
    ) -> RequestOutput:
        """Run one request; raises RequestError, Overloaded, EngineFailure, ShuttingDown or
        TimeoutError. Cancellation or timeout aborts the request and frees its rows. A request
        of known work that would not run alone and is predicted to outlast `timeout`, or to
        wait longer than `max_queue_wait_s`, is refused at once: Overloaded, with the queue's
        Retry-After."""
        prepare: Prepare = request if callable(request) else (lambda _catalogs: request)
        if work is None and isinstance(request, GenerationRequest):
            work = RequestWork.of(request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RequestOutput] = loop.create_future()
        rid = f"req-{next(self._ids)}"
        with self._cond:
            if self._stopping:
                raise ShuttingDown("the decoder is shutting down")
            waiting = len(self._inbox) + self._in_transit + self._engine_waiting
            prediction = self._predict(waiting, work)
            if waiting >= self.max_waiting:
                raise Overloaded(
                    f"{waiting} requests already waiting (limit {self.max_waiting}); retry later",
                    retry_after(prediction),
                )
            factor = self.calibration.factor()
            shed = shed_decision(prediction, timeout, self.max_queue_wait_s, factor)
            if shed is not None:
                raise Overloaded(
                    f"shed at once: {shed.reason}; retry after {shed.retry_after_s} s",
                    shed.retry_after_s,
                )
            backlog = Backlog() if work is None else Backlog(work.rows, work.rows * work.steps)
            self._inbox.append(_Job(rid, prepare, loop, future, backlog, time.monotonic()))
            self._arrived_since_answers += 1
            self._inbox_backlog += backlog
            self._cond.notify_all()
        # What a request that runs alone takes changes no decision: it is never shed.
        judged = None if prediction is None or prediction.alone else prediction.finish_s
        started = self._request_clock()
        try:
            out = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            if judged is not None and timeout is not None:
                self.calibration.record(judged, timeout)  # it took at least that long
            raise
        finally:
            if future.cancelled() or not future.done():
                self.abort(rid)
        if judged is not None and out.error is None:
            self.calibration.record(judged, self._request_clock() - started)
        return out

    def _predict(self, waiting: int, work: RequestWork | None) -> Prediction | None:
        """The caller holds the lock. None for work beyond the engine's limits: validation on
        the engine thread refuses it with the error that names the field, never a shed."""
        limits = self.engine.limits
        if work is None or not (
            work.rows <= limits.max_rows
            and work.steps < limits.max_model_len
            and work.rows * work.steps <= limits.max_kv_slots
        ):
            return None
        load = self._load
        queued = self._inbox_backlog + self._in_transit_backlog
        state = QueueState(
            load.queued_work + queued.work, waiting, load.waiting_rows + queued.rows,
            load.rows_in_use, self.engine.config.max_rows,
        )  # fmt: skip
        return predict(state, work.rows, work.steps, self.meter)

    # ----- engine thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._has_work)
                if self._stopping:
                    break
                jobs, self._inbox = self._inbox, []
                aborts, self._aborts = set(self._aborts), []
                swaps, self._swaps = self._swaps, []
                self._in_transit = len(jobs)
                self._in_transit_backlog, self._inbox_backlog = self._inbox_backlog, Backlog()
            try:
                if self.timeline is not None:
                    self.timeline.apply()
                self._apply_swaps(swaps)
                for job in jobs:
                    if job.rid in aborts:
                        self._leave_transit(job)
                self._submit([j for j in jobs if j.rid not in aborts])
                for rid in aborts:
                    self._abort(rid)
                if self.engine.has_unfinished():
                    self._step()
            except Exception:  # a bug in our own bookkeeping must not kill the loop either
                log.exception("engine loop iteration failed")
            self._publish_load()
        self._shutdown()

    def _has_work(self) -> bool:
        queued = self._inbox or self._aborts or self._swaps
        toggled = self.timeline is not None and self.timeline.pending
        return bool(queued) or toggled or self._stopping or self.engine.has_unfinished()

    def _apply_swaps(self, swaps: list[tuple[str, ServedCatalog | None]]) -> None:
        for name, served in swaps:
            self.engine.set_catalog(name, None if served is None else served.constraint)
            with self._cond:
                replaced = self._served.pop(name, None)
                if served is not None:
                    self._served[name] = served
                self._swaps_applied += 1
                self._cond.notify_all()
            if replaced is not None and replaced is not served:
                self.reaper.retire(replaced)
            del replaced
            log.info("catalog %s -> %s", name, "dropped" if served is None else served.version)

    def _submit(self, jobs: list[_Job]) -> None:
        served = self._served  # only this thread writes it
        counts, now = self.engine.step_counts, time.monotonic()
        counts.inbox_requests += len(jobs)
        counts.inbox_seconds += sum(now - job.arrived for job in jobs)
        for job in jobs:
            try:
                request = dataclasses.replace(job.prepare(served), request_id=job.rid)
                self.engine.submit(request)
            except RequestError as exc:
                self._leave_transit(job)
                _settle(job, error=exc)
                continue
            except Exception as exc:
                log.exception("request %s could not be submitted", job.rid)
                self._leave_transit(job)
                _settle(job, error=EngineFailure(f"engine error: {type(exc).__name__}: {exc}"))
                continue
            self._jobs[job.rid] = job

    def _intake(self) -> None:
        """Called by the engine mid-step, right before it admits: what arrived meanwhile is
        submitted now and joins this step. Drained only
        between steps, a closed loop's next request, sent as its answer left, missed the step
        that followed and waited one more. Aborts and swaps wait for the loop's next turn."""
        with self._cond:
            self._wait_for_group()
            if not self._inbox:
                return
            jobs, self._inbox = self._inbox, []
            self._in_transit += len(jobs)
            self._in_transit_backlog += self._inbox_backlog
            self._inbox_backlog = Backlog()
        self._submit(jobs)

    def _wait_for_group(self) -> None:
        """The caller holds the lock. With `group_wait_s`, wait until as many requests have
        arrived as answers left together last (at most that long; once per group; an abort or
        a stop ends it)."""
        expected, self._group_answers = self._group_answers, 0
        if self.group_wait_s <= 0 or self._arrived_since_answers >= expected:
            return
        started = time.monotonic()
        self._cond.wait_for(
            lambda: self._arrived_since_answers >= expected or self._stopping or self._aborts,
            self.group_wait_s,
        )
        counts = self.engine.step_counts
        counts.group_waits += 1
        counts.group_wait_seconds += time.monotonic() - started

    def _leave_transit(self, job: _Job) -> None:
        """A refused job's work leaves the queue before its caller hears of it: the caller's
        next request must not be predicted to wait behind work that will never run (a bad
        request of 2e9 tokens would otherwise shed the requests that follow it)."""
        with self._cond:
            self._in_transit = max(0, self._in_transit - 1)
            self._in_transit_backlog -= job.work

    def _abort(self, rid: str) -> None:
        if self._jobs.pop(rid, None) is not None:
            self.engine.abort(rid)

    def _step(self) -> None:
        try:
            self.meter.step_started()
            deliver = self._deliver if self.answers_at_step_start else None
            outputs = self.engine.step(self._intake, deliver)
            self.meter.step_finished(self.engine.last_step_rows)
        except Exception as exc:
            self.step_failures += 1
            log.exception("engine step failed; failing the requests it was running")
            self._fail_running(EngineFailure(f"engine step failed: {type(exc).__name__}: {exc}"))
            return
        self._deliver(outputs)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        """Settle each answer's caller (once: an answer delivered mid-step is gone from
        `_jobs` when the step returns it again); the group's size is what the next intake may
        wait for."""
        answered = [
            (job, out)
            for out in outputs
            if (job := self._jobs.pop(str(out.request_id), None)) is not None
        ]
        if answered and self.group_wait_s > 0:
            # counted before any caller hears: its next request counts as arrived
            with self._cond:
                self._group_answers, self._arrived_since_answers = len(answered), 0
        for job, out in answered:
            _settle(job, result=out)

    def _fail_running(self, error: Exception) -> None:
        """Abort (freeing rows and KV) every request past admission; waiting ones stay queued."""
        waiting = self.engine.stats().waiting_ids
        for rid in [r for r in self._jobs if r not in waiting]:
            job = self._jobs.pop(rid)
            try:
                self.engine.abort(rid)
            except Exception:
                log.exception("abort of %s after a failed step failed", rid)
            _settle(job, error=error)

    def _publish_load(self) -> None:
        stats = self.engine.stats()
        load = EngineLoad(
            rows_in_use=stats.rows_in_use,
            running=stats.running,
            waiting=stats.waiting,
            kv_slots_free=stats.kv_slots_free,
            queued_work=stats.queued_work,
            waiting_rows=stats.waiting_rows,
        )
        with self._cond:
            self._in_transit, self._in_transit_backlog = 0, Backlog()
            self._engine_waiting = load.waiting
            self._load = load

    def _shutdown(self) -> None:
        if self.timeline is not None:
            self.timeline.stop()
        with self._cond:
            pending, self._inbox = self._inbox, []
        for rid, job in list(self._jobs.items()):
            self.engine.abort(rid)
            pending.append(job)
        self._jobs.clear()
        for job in pending:
            _settle(job, error=ShuttingDown("the decoder is shutting down"))
        self._publish_load()


def _settle(job: _Job, result: Any = None, error: BaseException | None = None) -> None:
    def apply() -> None:
        if job.future.done():  # cancelled by the caller meanwhile
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    # RuntimeError: the caller's loop is closed, so nobody is waiting any more.
    with contextlib.suppress(RuntimeError):
        job.loop.call_soon_threadsafe(apply)
