"""How fast the host's CPU runs Python right now: the median wall time of a fixed workload.

The in-process engine's rate at n = 50 moved 175-256 req/s between passes of one run while
the GPU's SM clock held at ~1,975 MHz and its power fell with the rate, which points to the
host. A bench that times this probe before each phase can tell a phase run on a
slow host (another tenant, a lower CPU clock) from a change of its own: the same workload, the
same interpreter, so only the machine moves it.
"""

from __future__ import annotations

import statistics
import time

ROWS = 20_000


def _workload() -> int:
    # The engine host's kind of work: small objects, dict lookups, a sort, calls.
    rows = [(i * 7919 % ROWS, str(i)) for i in range(ROWS)]
    index = {key: value for key, value in rows}
    rows.sort()
    return sum(len(index[key]) for key, _ in rows[::8])


def probe_ms(repeats: int = 5) -> float:
    """Median milliseconds of the workload over `repeats` runs (a few ms each)."""
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        _workload()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)
