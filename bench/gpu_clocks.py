"""The GPU's SM clock, power and temperature over a bench run, by phase.

`nvidia-smi --loop-ms` prints a sample every 250 ms into a pipe; a thread stamps each line with
the host's monotonic clock as it arrives, so a phase's samples are the lines between its start
and end. Two runs of one bench in one device call differed more than most changes did (the tree
that ran first had the slower in-process engine); these columns say whether the device itself
ran differently. Without nvidia-smi (a CPU run) nothing is sampled and every window is empty.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import NamedTuple

QUERY = "clocks.sm,power.draw,temperature.gpu"
LOOP_MS = 250


class Sample(NamedTuple):
    at: float  # time.monotonic() when the line arrived
    sm_mhz: float
    power_w: float
    temp_c: float


def parse_sample(line: str, at: float) -> Sample | None:
    """One `--format=csv,noheader,nounits` line of QUERY (the first GPU's); None if unreadable
    (`[N/A]`, a header, a partial line)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 3:
        return None
    try:
        sm, power, temp = (float(f) for f in fields)
    except ValueError:
        return None
    return Sample(at, sm, power, temp)


def window_stats(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    """Mean SM clock and power, highest temperature, over [start, end]; {} without samples."""
    inside = [s for s in samples if start <= s.at <= end]
    if not inside:
        return {}
    return {
        "sm_mhz": round(sum(s.sm_mhz for s in inside) / len(inside), 1),
        "power_w": round(sum(s.power_w for s in inside) / len(inside), 1),
        "max_temp_c": max(s.temp_c for s in inside),
        "samples": len(inside),
    }


class GpuSampler:
    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> GpuSampler:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            return self
        cmd = [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", "0",
               f"--loop-ms={LOOP_MS}"]  # fmt: skip
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._thread = threading.Thread(target=self._read, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_sample(line, time.monotonic())
            if sample is not None:
                self.samples.append(sample)

    def window(self, start: float, end: float) -> dict[str, float]:
        return window_stats(list(self.samples), start, end)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=10)
