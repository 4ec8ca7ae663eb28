"""A timeline capture of the real engine on CPU: the phase marks of its steps are recorded
while it captures and cost nothing after; misuse is refused with an error that says what."""

from __future__ import annotations

import gc

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import no_annotation
from widebeam.services.decoder.profiling.capture import TimelineCapture
from widebeam.services.decoder.requests.spec import GenerationRequest

# Every phase a step of constrained beam requests goes through with overlap scheduling.
PHASES = {
    "step",
    "prepare",
    "intake",
    "admit",
    "prefill",
    "decode",
    "select",
    "wait_flags",
    "finish",
}


def requests(count: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"r{i}", (5, 6, i + 1), beam_width=4, n=4, constrained=True)
        for i in range(count)
    ]


def test_capture_records_every_phase_of_the_steps(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=64, max_kv_slots=4096)
    gc_callbacks = list(gc.callbacks)
    capture = TimelineCapture(engine)
    capture.start()
    assert capture.running and engine.annotate is not no_annotation
    steps = 0
    for req in requests(3):
        engine.submit(req)
    while engine.has_unfinished():
        engine.step(intake=lambda: None)
        steps += 1
    gc.collect()  # a full pass during the capture is counted
    capture.stop()
    gc.collect()  # and one after it is not
    assert not capture.running and engine.annotate is no_annotation
    summary = capture.summary()
    assert summary.steps == steps
    assert set(summary.host_ms_by_phase) >= PHASES, summary.host_ms_by_phase
    assert all(ms >= 0 for ms in summary.host_ms_by_phase.values())
    assert summary.gc_passes >= 1 and summary.gc_max_ms > 0 and gc_callbacks == gc.callbacks
    # A CPU engine has no device spans: the device's side stays empty.
    assert summary.window_ms == summary.device_busy_ms == 0 and summary.idle_gaps == 0
    # The engine is unchanged afterwards: it still answers.
    [out] = engine.generate(requests(1))
    assert out.error is None and len(out.beams) == 4


def test_capture_misuse_is_refused(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=16, max_kv_slots=4096)
    capture = TimelineCapture(engine)
    with pytest.raises(RuntimeError, match="no timeline capture is running"):
        capture.stop()
    with pytest.raises(RuntimeError, match="not been stopped"):
        capture.summary()
    capture.start()
    with pytest.raises(RuntimeError, match="runs once"):
        capture.start()
    with pytest.raises(RuntimeError, match="not been stopped"):
        capture.summary()
    capture.stop()
    with pytest.raises(RuntimeError, match="no timeline capture is running"):
        capture.stop()
    assert capture.summary().steps == 0
