"""One torch-profiler capture of the device and of the engine thread's phases.

`start` and `stop` run on the engine's thread: the profiler records host annotations of the
thread that started it, and the device's activity of the whole process. While capturing, the
engine's `annotate` is torch's `record_function`, so each phase of its steps shows on the
timeline; outside a capture it is a no-op. The collector's passes are timed on every thread (a
pass holds the GIL: the engine waits for any thread's); the callback only reads a clock, as
code run from inside a collection must not call into torch.
`summary` (the costly part: a Python pass over every event) may run on any thread after `stop`.
"""

from __future__ import annotations

import gc
import threading
import time

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from widebeam.services.decoder.engine import Engine, no_annotation
from widebeam.services.decoder.profiling.timeline import (
    ANNOTATION_PREFIX,
    Span,
    TimelineSummary,
    summarize,
)

RUNTIME_PREFIX = (
    "cu"  # the CUDA runtime's and driver's calls, as CUPTI names them (cudaMemcpyAsync)
)


class TimelineCapture:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._profile: profile | None = None
        self._stopped = False
        self._gc_started: dict[int, float] = {}  # thread -> its running pass' start
        self._gc_ms: list[float] = []  # each finished pass' wall time

    @property
    def running(self) -> bool:
        return self._profile is not None and not self._stopped

    def start(self) -> None:
        if self._profile is not None:
            raise RuntimeError("a timeline capture runs once")
        activities = [ProfilerActivity.CPU]
        if self.engine.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        self._profile = profile(activities=activities)
        self._profile.__enter__()
        gc.callbacks.append(self._on_gc)
        self.engine.annotate = record_function

    def stop(self) -> None:
        if not self.running:
            raise RuntimeError("no timeline capture is running")
        assert self._profile is not None
        self.engine.annotate = no_annotation
        gc.callbacks.remove(self._on_gc)
        self._gc_started.clear()
        self._profile.__exit__(None, None, None)
        self._stopped = True

    def _on_gc(self, phase: str, _info: dict[str, int]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            self._gc_started[thread] = time.perf_counter()
            return
        started = self._gc_started.pop(thread, None)
        if started is not None:  # (None: the pass began before the capture did)
            self._gc_ms.append((time.perf_counter() - started) * 1000)

    def summary(self) -> TimelineSummary:
        if self._profile is None or not self._stopped:
            raise RuntimeError("the capture has not been stopped")
        device: list[Span] = []
        host: list[Span] = []
        runtime: list[Span] = []  # CUDA runtime calls of every thread (only the engine's call)
        for event in self._profile.profiler.kineto_results.events():  # type: ignore[union-attr]
            name = event.name()
            on_device = event.device_type() == DeviceType.CUDA
            if name.startswith(ANNOTATION_PREFIX):  # the device's copy of a mark is no work
                if not on_device:
                    thread = event.start_thread_id()
                    host.append(Span(event.start_ns(), event.end_ns(), name, thread))
            elif on_device:
                device.append(Span(event.start_ns(), event.end_ns(), name))
            elif name.startswith(RUNTIME_PREFIX):
                runtime.append(Span(event.start_ns(), event.end_ns(), name))
        return summarize(device, host, self._gc_ms, runtime)
