"""Device timelines of a serving decoder, on a signal: the first SIGUSR1 starts one, the next
stops it and writes its summary to `<profile_dir>/timeline-<k>.json`.

The signal only flips a request; the engine thread starts and stops the profiler between steps
(`TimelineCapture` must run there), and a thread of its own summarizes and writes the file, so
serving never waits for the summary. A file is written whole (a temporary name, then renamed):
a reader that sees `timeline-<k>.json` sees all of it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.profiling.capture import TimelineCapture

log = logging.getLogger(__name__)


class TimelineRecorder:
    def __init__(self, engine: Engine, directory: Path) -> None:
        self.engine = engine
        self.directory = directory
        self._lock = threading.Lock()
        self._toggles = 0  # requested, not yet applied
        self._capture: TimelineCapture | None = None  # engine thread only
        self._written = 0
        self._writers: list[threading.Thread] = []

    # ----- any thread -------------------------------------------------------------------------
    def toggle(self) -> None:
        """Start a capture, or stop the running one (applied at the engine's next turn)."""
        with self._lock:
            self._toggles += 1

    @property
    def pending(self) -> bool:
        with self._lock:
            return self._toggles > 0

    def join(self, timeout: float | None = None) -> None:
        """Wait for the summaries being written."""
        for writer in list(self._writers):
            writer.join(timeout)

    # ----- engine thread ----------------------------------------------------------------------
    def apply(self) -> None:
        with self._lock:
            toggles, self._toggles = self._toggles, 0
        for _ in range(toggles):
            if self._capture is None:
                self._capture = TimelineCapture(self.engine)
                self._capture.start()
                log.info("device timeline started")
            else:
                capture, self._capture = self._capture, None
                capture.stop()
                self._written += 1
                path = self.directory / f"timeline-{self._written}.json"
                writer = threading.Thread(
                    target=self._write, args=(capture, path), name="timeline-writer", daemon=True
                )
                self._writers = [w for w in self._writers if w.is_alive()] + [writer]
                writer.start()

    def stop(self) -> None:
        """Shutting down: a running capture ends without a file."""
        if self._capture is not None:
            self._capture.stop()
            self._capture = None

    def _write(self, capture: TimelineCapture, path: Path) -> None:
        try:
            summary = capture.summary()
            self.directory.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.partial")
            partial.write_text(json.dumps(summary.to_json(), indent=1))
            os.replace(partial, path)
            log.info(
                "device timeline %s: device busy %.1f%% of %.0f ms",
                path, 100 * summary.device_busy_share, summary.window_ms,
            )  # fmt: skip
        except Exception:
            log.exception("device timeline %s could not be written", path)
