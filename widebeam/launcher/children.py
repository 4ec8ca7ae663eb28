"""Child processes with prefixed, streamed logs, an orderly shutdown, and no life of their own
after the launcher's."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

COLORS = ("36", "35", "33", "32", "34", "31")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook that has the kernel SIGKILL the child when the launcher dies, however it
    dies (kill -9 included); None where prctl does not exist. libc is loaded here, in the
    parent: loading a library between fork and exec can deadlock."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the launcher died before the signal was armed
            os._exit(1)

    return arm


class Child:
    """One service process; its stdout and stderr are copied line by line to `sink` as
    `name | line` so interleaved logs stay readable. `start` may be called again after the
    process ended (a restart), always from the launcher's main thread: the kernel sends the
    parent-death signal when the *thread* that started the child ends."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        sink: TextIO = sys.stdout,
        color: str | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.sink = sink
        tty = getattr(sink, "isatty", lambda: False)()
        self.prefix = f"\x1b[{color}m{name:>8} |\x1b[0m " if color and tty else f"{name:>8} | "
        self.proc: subprocess.Popen[str] | None = None
        self.started_at = 0.0  # time.monotonic() of the last start
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()
        self._markers: dict[str, str | None] = {}  # text to look for -> first line with it

    def start(self) -> Child:
        # A new session: Ctrl-C in the terminal reaches the launcher only, which then stops the
        # children in order instead of all of them dying at once.
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self.started_at = time.monotonic()
        with self._lock:
            self._markers = dict.fromkeys(self._markers)
        self._pump = threading.Thread(
            target=self._copy_output, args=(self.proc,), name=f"log-{self.name}", daemon=True
        )
        self._pump.start()
        return self

    def look_for(self, marker: str) -> None:
        """Remember the first output line (of each start) that contains `marker`."""
        with self._lock:
            self._markers.setdefault(marker, None)

    def line_with(self, marker: str) -> str | None:
        with self._lock:
            return self._markers.get(marker)

    def _copy_output(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                for marker, seen in self._markers.items():
                    if seen is None and marker in line:
                        self._markers[marker] = line.rstrip("\n")
                self.sink.write(self.prefix + line.rstrip("\n") + "\n")
                self.sink.flush()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace_s: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self._pump is not None:
            self._pump.join(2)
