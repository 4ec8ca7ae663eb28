"""`bench/host_probe.py`: a positive, finite time for its fixed workload, and a bad repeat count
refused."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "host_probe.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("host_probe", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_probe_times_its_workload() -> None:
    host_probe = _module()
    ms = host_probe.probe_ms(repeats=3)
    assert ms > 0 and math.isfinite(ms)
    assert host_probe._workload() == host_probe._workload()  # the same work every time


def test_a_repeat_count_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        _module().probe_ms(repeats=0)
