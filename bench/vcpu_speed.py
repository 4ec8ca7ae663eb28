"""How fast each of this machine's CPUs runs Python (`host_probe`), alone and beside a spinning
CPU: on a virtual machine two vCPUs may share one physical core (SMT siblings, or another
tenant's), and a thread's speed then depends on where it runs and what runs beside it.

    python3 vcpu_speed.py [--rounds 6] [--pairs]   # JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

from host_probe import probe_ms


def _spin(cpu: int, stop_at: float) -> None:
    os.sched_setaffinity(0, {cpu})
    while time.monotonic() < stop_at:
        pass


def probe_on(cpu: int) -> float:
    os.sched_setaffinity(0, {cpu})
    return round(probe_ms(repeats=3), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pause-s", type=float, default=5.0)
    parser.add_argument("--pairs", action="store_true", help="probe every CPU beside a spinner")
    args = parser.parse_args()
    if args.rounds < 1 or args.pause_s < 0:
        parser.error("--rounds must be >= 1 and --pause-s >= 0")
    cpus = sorted(os.sched_getaffinity(0))
    out: dict[str, object] = {"cpus": cpus, "alone": []}
    for _ in range(args.rounds):
        out["alone"].append({str(c): probe_on(c) for c in cpus})  # type: ignore[union-attr]
        time.sleep(args.pause_s)
    if args.pairs:
        pairs = {}
        for spun in cpus:
            spinner = multiprocessing.Process(target=_spin, args=(spun, time.monotonic() + 30))
            spinner.start()
            time.sleep(0.2)
            pairs[str(spun)] = {str(c): probe_on(c) for c in cpus if c != spun}
            spinner.terminate()
            spinner.join()
        out["beside_spinner"] = pairs
    os.sched_setaffinity(0, set(cpus))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
