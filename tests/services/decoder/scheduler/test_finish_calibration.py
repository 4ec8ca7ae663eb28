"""The deadline rule's calibration: a high quantile of how late admitted requests finished
against their predicted finish, over a sliding window, within bounds, 1 until enough were
seen; predictions of no time (or not finite) are left out."""

from __future__ import annotations

import math
import threading

import pytest

from widebeam.services.decoder.scheduler.finish_calibration import FinishCalibration


def test_the_factor_is_one_until_enough_requests_were_seen() -> None:
    calibration = FinishCalibration(window=10, quantile=0.9, min_samples=3)
    for _ in range(2):
        calibration.record(predicted_s=0.1, actual_s=0.3)
    assert calibration.samples == 2 and calibration.factor() == 1.0
    calibration.record(predicted_s=0.1, actual_s=0.3)
    assert calibration.factor() == pytest.approx(3.0)


def test_the_factor_is_the_quantile_of_the_ratios() -> None:
    calibration = FinishCalibration(window=100, quantile=0.9, min_samples=1)
    for ratio in range(1, 11):  # 1.0 .. 10.0 in tenths of the bound
        calibration.record(predicted_s=10.0, actual_s=float(ratio) * 3)  # ratios 0.3 .. 3.0
    assert calibration.factor() == pytest.approx(2.7)  # the 9th of 10 sorted
    median = FinishCalibration(window=100, quantile=0.5, min_samples=1)
    for ratio in (0.8, 1.2, 1.0):
        median.record(1.0, ratio)
    assert median.factor() == pytest.approx(1.0)


def test_old_requests_leave_the_window() -> None:
    calibration = FinishCalibration(window=4, quantile=1.0, min_samples=1)
    calibration.record(1.0, 3.0)
    for _ in range(4):
        calibration.record(1.0, 1.1)
    assert calibration.samples == 4 and calibration.factor() == pytest.approx(1.1)


def test_the_factor_stays_within_its_bounds() -> None:
    late = FinishCalibration(min_samples=1, bounds=(0.5, 4.0))
    late.record(0.01, 60.0)  # a stall: 6,000x
    assert late.factor() == 4.0
    early = FinishCalibration(min_samples=1, bounds=(0.5, 4.0))
    early.record(1.0, 0.0)
    assert early.factor() == 0.5


def test_predictions_of_no_time_are_left_out() -> None:
    calibration = FinishCalibration(min_samples=1)
    for predicted, actual in ((0.0, 1.0), (-1.0, 1.0), (math.inf, 1.0), (math.nan, 1.0),
                              (1.0, math.inf), (1.0, math.nan)):  # fmt: skip
        calibration.record(predicted, actual)
    assert calibration.samples == 0 and calibration.factor() == 1.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"quantile": 0.0},
        {"quantile": 1.5},
        {"min_samples": 0},
        {"window": 4, "min_samples": 5},
        {"bounds": (0.0, 4.0)},
        {"bounds": (1.2, 4.0)},
        {"bounds": (0.5, 0.9)},
        {"bounds": (0.5, math.inf)},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        FinishCalibration(**kwargs)  # type: ignore[arg-type]


def test_reads_while_another_thread_records() -> None:
    """A metrics scrape reads the factor while the event loop records: no error, and every
    record counts."""
    calibration = FinishCalibration(window=100_000, min_samples=1)
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not stop.is_set():
                calibration.factor()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(20_000):
            calibration.record(1.0, 1.0 + (i % 7) / 10)
    finally:
        stop.set()
        reader.join()
    assert not errors and calibration.samples == 20_000
    assert calibration.factor() == pytest.approx(1.6)
