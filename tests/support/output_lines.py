"""`OutputLines`: a child process's text output read line by line on a thread, so that a test
can wait for a line (its 'listening on' address) with a deadline, never blocked on a child that
prints nothing more."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from typing import IO

POLL_S = 0.2  # how often the wait looks at the child again while no line comes


class OutputLines:
    def __init__(self, stream: IO[str] | None) -> None:
        if stream is None:
            raise ValueError("the child's output is not a pipe (stdout/stderr=PIPE)")
        self.lines: list[str] = []  # read so far, in order
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)

    def wait_for(
        self, pattern: re.Pattern[str], proc: subprocess.Popen[str], timeout: float
    ) -> re.Match[str]:
        """The first line matching `pattern`, read while `proc` runs and within `timeout`
        seconds; else AssertionError with the output so far."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                self.lines.append(self._queue.get(timeout=POLL_S))
            except queue.Empty:
                continue
            if match := pattern.search(self.lines[-1]):
                return match
        raise AssertionError(f"no line matching {pattern.pattern!r}:\n" + "".join(self.lines))

    def drain(self) -> list[str]:
        """`lines` with every line read since the last wait added."""
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return self.lines
