"""One torch-profiler capture of the device and of the engine thread's phases.

`start` and `stop` run on the engine's thread: the profiler records host annotations of the
thread that started it, and the device's activity of the whole process. While capturing, the
engine's `annotate` is torch's `record_function`, so each phase of its steps shows on the
timeline; outside a capture it is a no-op. `summary` (the costly part: a Python pass over every
event) may run on any thread after `stop`.
"""

from __future__ import annotations

from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from widebeam.services.decoder.engine import Engine, no_annotation
from widebeam.services.decoder.profiling.timeline import (
    ANNOTATION_PREFIX,
    Span,
    TimelineSummary,
    summarize,
)


class TimelineCapture:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._profile: profile | None = None
        self._stopped = False

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
        self.engine.annotate = record_function

    def stop(self) -> None:
        if not self.running:
            raise RuntimeError("no timeline capture is running")
        assert self._profile is not None
        self.engine.annotate = no_annotation
        self._profile.__exit__(None, None, None)
        self._stopped = True

    def summary(self) -> TimelineSummary:
        if self._profile is None or not self._stopped:
            raise RuntimeError("the capture has not been stopped")
        device: list[Span] = []
        host: list[Span] = []
        for event in self._profile.profiler.kineto_results.events():  # type: ignore[union-attr]
            name = event.name()
            if event.device_type() == DeviceType.CUDA:
                device.append(Span(event.start_ns(), event.end_ns(), name))
            elif name.startswith(ANNOTATION_PREFIX):
                host.append(Span(event.start_ns(), event.end_ns(), name, event.start_thread_id()))
        return summarize(device, host)
