"""Resident memory of a local process, from /proc (Linux)."""

from __future__ import annotations


def rss_bytes(pid: int) -> int:
    """VmRSS of process `pid` in bytes; OSError when there is no such process."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no VmRSS in /proc/{pid}/status")
