"""Watch the host while a bench runs: once a second, how fast it runs Python (`host_probe`), its
busy and stolen cores (`host_cpu`), and the processes that used the most CPU meanwhile.

The in-process engine's n = 50 rate and the host probe both fell by up to half between the
first phases of `stack.py` and the later ones. A time series next to the bench's phase start
times (`started_unix` in its rows) says when the host slowed and who was busy then: the
bench's own processes, others on this machine, or the hypervisor (steal).

    python3 host_watch.py --out $OUT/host_watch.jsonl &   # stopped by SIGTERM or SIGINT
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from host_cpu import host_seconds, process_table
from host_probe import probe_ms

TOP = 5  # busiest processes listed per sample


def process_seconds() -> dict[int, tuple[str, float]]:
    """pid -> (command name, user + system CPU seconds) of every live process."""
    return {pid: (p.name, p.own_s) for pid, p in process_table().items()}


def busiest(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float
) -> list[list[object]]:
    """[pid, name, cores] of the TOP processes by CPU between two `process_seconds` reads."""
    used = [
        (cpu - before.get(pid, (name, 0.0))[1], pid, name) for pid, (name, cpu) in after.items()
    ]
    used.sort(reverse=True)
    return [[pid, name, round(cpu / seconds, 3)] for cpu, pid, name in used[:TOP] if cpu > 0]


def watch(out: Path, interval_s: float) -> None:
    stop = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    at, host, procs = time.monotonic(), host_seconds(), process_seconds()
    with out.open("a") as sink:
        while not stop:
            time.sleep(interval_s)
            probe = probe_ms(repeats=3)
            now_at, now_host, now_procs = time.monotonic(), host_seconds(), process_seconds()
            seconds = now_at - at
            row = {
                "unix": round(time.time(), 3),
                "probe_ms": round(probe, 2),
                "host_cores": round((now_host[0] - host[0]) / seconds, 3),
                "steal_cores": round((now_host[1] - host[1]) / seconds, 3),
                "load1": os.getloadavg()[0],
                "top": busiest(procs, now_procs, seconds),
            }
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            at, host, procs = now_at, now_host, now_procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--interval-s", type=float, default=1.0)
    args = parser.parse_args()
    if not args.interval_s > 0:
        parser.error("--interval-s must be > 0")
    watch(args.out, args.interval_s)


if __name__ == "__main__":
    main()
