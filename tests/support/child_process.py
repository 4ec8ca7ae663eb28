"""Stopping a test's child process (a service, redis-server, `widebeam up`): SIGTERM first, so
it shuts down as in production, then SIGKILL if it outlives the grace period; reaped either
way, so no test leaves a process or a zombie behind."""

from __future__ import annotations

import subprocess

KILL_WAIT_S = 10.0  # after SIGKILL the kernel ends it at once; this only bounds the reap


def stop_child(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM `proc`; SIGKILL it if it has not exited after `grace_s` seconds."""
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(KILL_WAIT_S)
