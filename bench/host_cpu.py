"""Who used the host's CPU over a window: the whole machine, this bench's own process tree, and
the hypervisor's steal (Linux, from /proc).

The in-process engine's n = 50 rate follows the host's speed (`host_probe.py`), which fell by
about half after the servers started although they idle between phases. With the host's busy
cores beside the bench's own, a phase run while another tenant (or a process of ours that
should idle) took the CPU reads as such instead of as a change of the code.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

PROC = Path("/proc")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal ...; idle and iowait are
# not busy, steal is time the hypervisor gave another guest.
_IDLE_FIELDS = (3, 4)
_STEAL_FIELD = 7


@dataclass(frozen=True)
class CpuSample:
    at: float  # time.monotonic()
    host_busy_s: float  # every CPU's busy time, summed
    steal_s: float
    tree_s: float  # the root process and all its descendants, user + system

    @staticmethod
    def take(root_pid: int) -> CpuSample:
        busy, steal = host_seconds()
        return CpuSample(time.monotonic(), busy, steal, tree_cpu_s(root_pid))


def window_cores(start: CpuSample, end: CpuSample) -> dict[str, float]:
    """Average busy cores between two samples: the host's, this tree's, the others' (the host's
    less this tree's) and the steal; {} for an empty window."""
    wall = end.at - start.at
    if wall <= 0:
        return {}
    host = (end.host_busy_s - start.host_busy_s) / wall
    ours = (end.tree_s - start.tree_s) / wall
    return {
        "host": host,
        "ours": ours,
        "others": max(host - ours, 0.0),
        "steal": (end.steal_s - start.steal_s) / wall,
    }


def host_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole host since boot; (0, 0) without /proc/stat."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    ticks = [int(value) for value in first[1:9]]
    tick = os.sysconf("SC_CLK_TCK")
    busy = sum(t for i, t in enumerate(ticks) if i not in _IDLE_FIELDS and i != _STEAL_FIELD)
    return busy / tick, ticks[_STEAL_FIELD] / tick


class ProcessCpu(NamedTuple):
    name: str  # the command name (/proc/PID/stat's comm)
    parent: int
    own_s: float  # user + system CPU seconds of the process itself
    reaped_s: float  # ... of its children it has waited for


def process_table() -> dict[int, ProcessCpu]:
    """Every live process' name, parent and CPU seconds, from /proc/*/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        # fields[1]: ppid; [11:15]: utime stime cutime cstime
        own, reaped = (int(fields[11]) + int(fields[12])), (int(fields[13]) + int(fields[14]))
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        table[int(entry.name)] = ProcessCpu(name, int(fields[1]), own / tick, reaped / tick)
    return table


def tree_cpu_s(root_pid: int) -> float:
    """User + system CPU seconds of `root_pid` and every live descendant (children's own waited
    children included, as the kernel counts them)."""
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, process in table.items():
        children.setdefault(process.parent, []).append(pid)
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid].own_s + table[pid].reaped_s
        todo += children.get(pid, [])
    return total
