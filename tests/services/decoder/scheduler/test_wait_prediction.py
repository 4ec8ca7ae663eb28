"""Admission by predicted wait, with a fake clock: the throughput estimate, the wait of a
request that fits, fits with the queue ahead of it, or queues, its run at the load it joins,
and the shed rule with its Retry-After."""

from __future__ import annotations

import pytest

from widebeam.services.decoder.scheduler.wait_prediction import (
    Backlog,
    Prediction,
    QueueState,
    ThroughputMeter,
    predict,
    retry_after,
    shed_decision,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def timed_meter(rows: int = 1000, seconds: float = 0.1, steps: int = 1) -> ThroughputMeter:
    clock = FakeClock()
    meter = ThroughputMeter(clock, smoothing=0.5)
    for _ in range(steps):
        meter.step_started()
        clock.now += seconds
        meter.step_finished(rows)
    return meter


def queue(work_ahead: int, queued: int = 1, rows_in_use: int = 1000) -> QueueState:
    return QueueState(work_ahead, queued, queued_rows=100 * queued, rows_in_use=rows_in_use,
                      max_rows=1000)  # fmt: skip


def test_meter_measures_rows_steps_per_second_and_step_time() -> None:
    meter = timed_meter(rows=1000, seconds=0.1)
    assert meter.rows_steps_per_s == pytest.approx(10_000)
    assert meter.step_s == pytest.approx(0.1)


def test_meter_smooths_towards_new_steps() -> None:
    clock = FakeClock()
    meter = ThroughputMeter(clock, smoothing=0.5)
    for seconds in (0.1, 0.3):
        meter.step_started()
        clock.now += seconds
        meter.step_finished(1000)
    assert meter.step_s == pytest.approx(0.2)
    assert meter.rows_steps_per_s == pytest.approx((10_000 + 1000 / 0.3) / 2)


def test_idle_steps_are_not_measured() -> None:
    meter = timed_meter(rows=0)
    assert meter.rows_steps_per_s is None and meter.step_s is None


def test_meter_rejects_a_finish_without_a_start_and_bad_smoothing() -> None:
    with pytest.raises(RuntimeError, match="step_started"):
        ThroughputMeter(FakeClock()).step_finished(10)
    with pytest.raises(ValueError, match="smoothing"):
        ThroughputMeter(FakeClock(), smoothing=0)


def test_nothing_is_predicted_or_shed_before_a_step_is_timed() -> None:
    prediction = predict(queue(10**9), rows=50, steps=4, meter=ThroughputMeter(FakeClock()))
    assert prediction is None
    assert shed_decision(prediction, deadline_s=0.001, max_queue_wait_s=0) is None
    assert retry_after(prediction) is None


def test_a_request_that_fits_now_waits_nothing() -> None:
    state = QueueState(work_ahead=5000, queued=0, queued_rows=0, rows_in_use=900, max_rows=1000)
    prediction = predict(state, rows=100, steps=4, meter=timed_meter())
    assert prediction == Prediction(0.0, pytest.approx(0.4))


def test_a_queued_request_waits_for_the_work_ahead_to_drain() -> None:
    # 30k rows x steps ahead at 10k per second: 3 s, then 4 steps of 0.1 s.
    prediction = predict(queue(30_000), rows=100, steps=4, meter=timed_meter())
    assert prediction is not None
    assert prediction.wait_s == pytest.approx(3.0)
    assert prediction.finish_s == pytest.approx(3.4)
    # Rows full with nothing queued: it waits too.
    full = QueueState(work_ahead=30_000, queued=0, queued_rows=0, rows_in_use=950, max_rows=1000)
    waiting = predict(full, rows=100, steps=4, meter=timed_meter())
    assert waiting is not None and waiting.wait_s == pytest.approx(3.0)


def test_a_request_that_fits_with_the_queue_ahead_waits_a_step_at_most() -> None:
    """Twelve closed-loop callers of n = 1000 arriving together: the rows hold them all, so
    each is taken with the ones queued ahead, however much work runs meanwhile."""
    ahead = QueueState(work_ahead=10**9, queued=11, queued_rows=11_000, rows_in_use=0,
                       max_rows=16_384)  # fmt: skip
    prediction = predict(ahead, rows=1000, steps=4, meter=timed_meter(seconds=0.08))
    assert prediction == Prediction(pytest.approx(0.08), pytest.approx(0.4))
    assert shed_decision(prediction, deadline_s=1.0, max_queue_wait_s=0.1) is None
    # One row more than the rows hold: it waits for the work ahead to drain, and is shed.
    over = QueueState(work_ahead=30_000, queued=11, queued_rows=15_385, rows_in_use=0,
                      max_rows=16_384)  # fmt: skip
    waiting = predict(over, rows=1000, steps=4, meter=timed_meter())
    assert waiting is not None and waiting.wait_s == pytest.approx(3.0)
    assert shed_decision(waiting, deadline_s=None, max_queue_wait_s=0.1) is not None


def test_backlog_adds_and_never_goes_below_zero() -> None:
    total = Backlog(50, 200) + Backlog(1000, 4000)
    assert total == Backlog(1050, 4200)
    assert total - Backlog(50, 200) == Backlog(1000, 4000)
    assert Backlog(10, 40) - Backlog(50, 200) == Backlog(0, 0)


def test_shed_past_the_deadline_with_retry_after_from_the_queue() -> None:
    prediction = predict(queue(30_000), rows=100, steps=4, meter=timed_meter())
    shed = shed_decision(prediction, deadline_s=1.0, max_queue_wait_s=None)
    assert shed is not None
    assert shed.retry_after_s == 3  # 3.4 s predicted - 1 s budget, rounded up
    assert "past its deadline" in shed.reason
    assert shed_decision(prediction, deadline_s=3.5, max_queue_wait_s=None) is None


def test_step_time_scales_the_recent_steps_down_to_fewer_rows_never_up() -> None:
    assert ThroughputMeter(FakeClock()).step_time(100) is None
    meter = timed_meter(rows=1000, seconds=0.1)
    assert meter.rows_per_step == pytest.approx(1000)
    assert meter.step_time(250) == pytest.approx(0.025)
    assert meter.step_time(1000) == pytest.approx(0.1)
    assert meter.step_time(4000) == pytest.approx(0.1)


def test_a_request_that_starts_at_once_is_shed_when_its_run_outlasts_its_deadline() -> None:
    """It joins 900 running rows: four steps of 1,000 rows at 0.1 s, 0.4 s in all. Admitted,
    it would hold 100 rows until its deadline aborted it."""
    state = QueueState(work_ahead=30_000, queued=0, queued_rows=0, rows_in_use=900, max_rows=1000)
    prediction = predict(state, rows=100, steps=4, meter=timed_meter())
    assert prediction == Prediction(0.0, pytest.approx(0.4), alone=False)
    shed = shed_decision(prediction, deadline_s=0.3, max_queue_wait_s=None)
    assert shed is not None and "its own steps at the current load" in shed.reason
    assert shed.retry_after_s == 1
    assert shed_decision(prediction, deadline_s=0.5, max_queue_wait_s=None) is None
    # A queue-wait bound alone never sheds what starts at once, however long its run.
    assert shed_decision(prediction, deadline_s=None, max_queue_wait_s=0.0) is None


def test_a_request_that_would_run_alone_is_never_shed_for_its_deadline() -> None:
    idle = QueueState(work_ahead=0, queued=0, queued_rows=0, rows_in_use=0, max_rows=1000)
    prediction = predict(idle, rows=1000, steps=1000, meter=timed_meter())  # 100 s of steps
    assert prediction == Prediction(0.0, pytest.approx(100.0), alone=True)
    assert shed_decision(prediction, deadline_s=0.3, max_queue_wait_s=0.0) is None
    # The same request beside one running row is shed: it joins the engine's load.
    busy = QueueState(work_ahead=10, queued=0, queued_rows=0, rows_in_use=1, max_rows=2000)
    beside = predict(busy, rows=1000, steps=1000, meter=timed_meter())
    assert beside is not None and not beside.alone
    assert shed_decision(beside, deadline_s=0.3, max_queue_wait_s=None) is not None


def test_after_a_burst_a_lone_request_is_predicted_at_its_own_rows() -> None:
    """The last steps ran 16,000 rows at 0.1 s each; a request of 50 rows arriving to an idle
    engine steps far faster than that, and its 0.3 s deadline admits it."""
    burst = timed_meter(rows=16_000, seconds=0.1, steps=5)
    idle = QueueState(work_ahead=0, queued=0, queued_rows=0, rows_in_use=0, max_rows=16_384)
    prediction = predict(idle, rows=50, steps=4, meter=burst)
    assert prediction is not None and prediction.finish_s == pytest.approx(4 * 0.1 * 50 / 16_000)
    assert shed_decision(prediction, deadline_s=0.3, max_queue_wait_s=0.0) is None


def test_shed_past_the_queue_wait_bound() -> None:
    prediction = predict(queue(30_000), rows=100, steps=4, meter=timed_meter())
    shed = shed_decision(prediction, deadline_s=None, max_queue_wait_s=0.5)
    assert shed is not None and shed.retry_after_s == 3  # 3 s wait - 0.5 s, rounded up
    assert "max_queue_wait_s" in shed.reason
    assert shed_decision(prediction, deadline_s=None, max_queue_wait_s=3.0) is None


def test_no_budget_admits_everything() -> None:
    prediction = predict(queue(10**9), rows=100, steps=4, meter=timed_meter())
    assert shed_decision(prediction, deadline_s=None, max_queue_wait_s=None) is None


def test_retry_after_is_at_least_one_second() -> None:
    prediction = predict(queue(100), rows=100, steps=1, meter=timed_meter())  # 10 ms wait
    shed = shed_decision(prediction, deadline_s=None, max_queue_wait_s=0.0)
    assert shed is not None and shed.retry_after_s == 1
    assert retry_after(prediction) == 1


def test_a_faster_engine_admits_what_a_slower_one_sheds() -> None:
    slow = predict(queue(30_000), rows=100, steps=4, meter=timed_meter(seconds=0.1))
    fast = predict(queue(30_000), rows=100, steps=4, meter=timed_meter(seconds=0.01))
    assert shed_decision(slow, deadline_s=1.0, max_queue_wait_s=None) is not None
    assert shed_decision(fast, deadline_s=1.0, max_queue_wait_s=None) is None


def test_the_calibration_factor_scales_the_finish_held_against_the_deadline() -> None:
    """0.4 s predicted fits a 0.5 s deadline as it is, not once recent requests finished 1.5x
    later than predicted: shed, with the Retry-After of the scaled finish, and the reason
    names the scaling. A request that would run alone is still never shed."""
    state = QueueState(work_ahead=30_000, queued=0, queued_rows=0, rows_in_use=900, max_rows=1000)
    prediction = predict(state, rows=100, steps=4, meter=timed_meter())
    assert shed_decision(prediction, deadline_s=0.5, max_queue_wait_s=None) is None
    shed = shed_decision(prediction, deadline_s=0.5, max_queue_wait_s=None, finish_factor=1.5)
    assert shed is not None and "x1.50" in shed.reason and "0.60 s" in shed.reason
    assert shed.retry_after_s == 1
    late = shed_decision(prediction, deadline_s=0.5, max_queue_wait_s=None, finish_factor=4.0)
    assert late is not None and late.retry_after_s == 2  # 1.6 s - 0.5 s, rounded up
    # An early-finishing history lets a tighter deadline in.
    assert shed_decision(prediction, deadline_s=0.3, max_queue_wait_s=None,
                         finish_factor=0.5) is None  # fmt: skip
    idle = QueueState(work_ahead=0, queued=0, queued_rows=0, rows_in_use=0, max_rows=1000)
    alone = predict(idle, rows=100, steps=4, meter=timed_meter())
    assert shed_decision(alone, deadline_s=0.01, max_queue_wait_s=None, finish_factor=4.0) is None
