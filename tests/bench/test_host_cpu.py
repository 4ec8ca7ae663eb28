"""`bench/host_cpu.py`: a child that spins counts as this tree's CPU, the host's busy time covers
it, and a window's cores are averages over its wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.bench.smoke import load_bench_module

SPIN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def test_a_spinning_child_is_counted_in_the_tree_and_the_host() -> None:
    host_cpu = load_bench_module("host_cpu")
    start = host_cpu.CpuSample.take(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=0.5)])
    try:
        deadline = time.monotonic() + 120
        # read while the child lives: its CPU is its own then, not yet this process' cutime
        while child.poll() is None and host_cpu.tree_cpu_s(child.pid) < 0.3:
            assert time.monotonic() < deadline, "the child never spun"
            time.sleep(0.05)
        live = host_cpu.CpuSample.take(os.getpid())
    finally:
        child.wait(timeout=120)
    assert live.tree_s - start.tree_s >= 0.3  # the child is in this process' tree
    end = host_cpu.CpuSample.take(os.getpid())
    assert end.tree_s - start.tree_s >= 0.5 - 0.05  # reaped: counted as this process' cutime
    assert end.host_busy_s - start.host_busy_s >= 0.45  # the host saw it too
    cores = host_cpu.window_cores(start, end)
    assert set(cores) == {"host", "ours", "others", "steal"}
    wall = end.at - start.at
    assert abs(cores["ours"] - (end.tree_s - start.tree_s) / wall) < 1e-9
    assert cores["others"] == max(cores["host"] - cores["ours"], 0.0)
    assert min(cores.values()) >= 0


def test_an_empty_window_has_no_cores() -> None:
    host_cpu = load_bench_module("host_cpu")
    sample = host_cpu.CpuSample.take(os.getpid())
    assert host_cpu.window_cores(sample, sample) == {}


def test_an_unknown_root_has_no_cpu() -> None:
    host_cpu = load_bench_module("host_cpu")
    assert host_cpu.tree_cpu_s(2**31 - 1) == 0.0  # above any pid Linux gives out
