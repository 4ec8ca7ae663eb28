"""`bench/gpu_clocks.py`: nvidia-smi's CSV lines read into samples (unreadable ones skipped),
and a phase's window averaged from the samples that arrived inside it."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.smoke import load_bench_module


@pytest.fixture(scope="module")
def gpu_clocks() -> ModuleType:
    return load_bench_module("gpu_clocks")


def test_lines_as_nvidia_smi_prints_them(gpu_clocks: ModuleType) -> None:
    sample = gpu_clocks.parse_sample("1980, 612.35, 55\n", 3.0)
    assert sample == gpu_clocks.Sample(3.0, 1980.0, 612.35, 55.0)
    for unreadable in ("[N/A], 80.1, 40", "clocks.sm [MHz], power.draw [W], temperature.gpu",
                       "1980, 612.35", "", "1980, 612.35, 55, 1"):  # fmt: skip
        assert gpu_clocks.parse_sample(unreadable, 1.0) is None, unreadable


def test_a_window_holds_the_samples_inside_it(gpu_clocks: ModuleType) -> None:
    s = gpu_clocks.Sample
    samples = [s(0.5, 345, 80, 38), s(1.0, 1980, 600, 50), s(1.5, 1900, 650, 57),
               s(2.0, 1700, 700, 55), s(3.0, 345, 90, 45)]  # fmt: skip
    assert gpu_clocks.window_stats(samples, 1.0, 2.0) == {
        "sm_mhz": 1860.0, "power_w": 650.0, "max_temp_c": 57.0, "samples": 3
    }  # fmt: skip
    assert gpu_clocks.window_stats(samples, 2.1, 2.9) == {}
    assert gpu_clocks.window_stats([], 0.0, 10.0) == {}


def test_without_nvidia_smi_nothing_is_sampled(
    gpu_clocks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sampler = gpu_clocks.GpuSampler().start()
    assert sampler.window(0.0, float("inf")) == {}
    sampler.stop()


def test_the_reader_stamps_each_line_as_it_arrives(
    gpu_clocks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for nvidia-smi (CI has no GPU): three samples, then it waits to be stopped.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '1980, 600.5, 50'\necho '[N/A], 1, 1'\n"
                   "echo '1900, 610.5, 52'\necho '1800, 620.5, 54'\nexec sleep 60\n")  # fmt: skip
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    sampler = gpu_clocks.GpuSampler().start()
    try:
        deadline = time.monotonic() + 60
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sampler.window(0.0, time.monotonic()) == {
            "sm_mhz": 1893.3, "power_w": 610.5, "max_temp_c": 54.0, "samples": 3
        }  # fmt: skip
    finally:
        sampler.stop()
    assert sampler._proc.poll() is not None  # stopped with the sampler
