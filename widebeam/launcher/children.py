"""Child processes with prefixed, streamed logs and an orderly shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TextIO

COLORS = ("36", "35", "33", "32", "34", "31")


class Child:
    """One service process; its stdout and stderr are copied line by line to `sink` as
    `name | line` so interleaved logs stay readable."""

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
        self._pump: threading.Thread | None = None
        self._lock = threading.Lock()

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
        )
        self._pump = threading.Thread(
            target=self._copy_output, name=f"log-{self.name}", daemon=True
        )
        self._pump.start()
        return self

    def _copy_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.sink.write(self.prefix + line.rstrip("\n") + "\n")
                self.sink.flush()

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
