"""`bench/host_probe.py`: a positive, finite time for its fixed workload, and a bad repeat count
refused."""

from __future__ import annotations

import math

import pytest

from tests.bench.smoke import load_bench_module


def test_the_probe_times_its_workload() -> None:
    host_probe = load_bench_module("host_probe")
    ms = host_probe.probe_ms(repeats=3)
    assert ms > 0 and math.isfinite(ms)
    assert host_probe._workload() == host_probe._workload()  # the same work every time


def test_a_repeat_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        load_bench_module("host_probe").probe_ms(repeats=0)
