"""Device timelines for the stack bench (`stack.py --timeline DIR`): the in-process engine's
through `TimelineCapture`, the decoder process' through its SIGUSR1 recorder (`--profile-dir`).
Each closed-loop phase gets one: the device's busy share, and its idle time per request by the
engine phase the host was in (`widebeam.services.decoder.profiling.timeline`)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.profiling.capture import TimelineCapture
from widebeam.services.decoder.profiling.timeline import SPAN_LENGTH_CLASSES_NS

IDLE_COLUMNS = 4  # the phases with the most idle time, per row


class EngineTimeline:
    """The in-process engine's capture over one block (the bench drives the engine on this
    thread, so the capture starts and stops on the engine's thread)."""

    def __init__(self, engine: Engine) -> None:
        self.capture = TimelineCapture(engine)

    def __enter__(self) -> EngineTimeline:
        self.capture.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.capture.stop()

    def summary(self) -> dict:
        return self.capture.summary().to_json()


class DecoderTimelines:
    """Toggle the decoder's recorder; each stop's summary is its next `timeline-<k>.json`."""

    def __init__(self, pid: int, directory: Path, timeout_s: float = 120.0) -> None:
        self.pid = pid
        self.directory = directory
        self.timeout_s = timeout_s
        self.taken = 0

    def start(self) -> None:
        os.kill(self.pid, signal.SIGUSR1)

    def stop(self) -> dict:
        os.kill(self.pid, signal.SIGUSR1)
        self.taken += 1
        path = self.directory / f"timeline-{self.taken}.json"
        deadline = time.monotonic() + self.timeout_s
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the decoder wrote no {path} in {self.timeout_s:.0f} s (its log says why)"
                )
            time.sleep(0.2)
        return json.loads(path.read_text())


def timeline_cells(timeline: dict, answered: int) -> list[str]:
    """Busy share; device time, device spans and the short spans' time per request (a forward
    over few rows costs about its kernel count); the largest idle phases as `phase ms/req`;
    the collector's passes."""
    if not timeline:
        return ["-"] * len(TIMELINE_HEADERS)
    per = max(answered, 1)
    idle = list(timeline["idle_ms_by_phase"].items())[:IDLE_COLUMNS]
    cells = [f"{name} {ms / per:.2f}" for name, ms in idle]
    lengths = timeline.get("spans_by_length", {})
    short = [f"{lengths[label][1] / per:.2f}" if label in lengths else "-" for label in SHORT]
    gc = f"{timeline['gc_passes']}: {timeline['gc_ms']:.0f} ({timeline['gc_max_ms']:.0f})"
    return [
        f"{timeline['device_busy_share']:.2f}",
        f"{timeline['device_busy_ms'] / per:.2f}",
        f"{timeline.get('device_spans', 0) / per:.0f}",
        *short,
        *cells,
        *["-"] * (IDLE_COLUMNS - len(cells)),
        gc,
    ]


SHORT = [label for limit, label in SPAN_LENGTH_CLASSES_NS if limit is not None]
TIMELINE_HEADERS = [
    "device busy", "device ms/req", "device spans/req", *(f"{lb} ms/req" for lb in SHORT),
    *(f"idle #{i + 1} ms/req" for i in range(IDLE_COLUMNS)), "gc passes: ms (longest)",
]  # fmt: skip
