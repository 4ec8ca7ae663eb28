"""Device timelines of a serving engine: a toggle starts a capture on the engine thread, the
next one writes `timeline-<k>.json` whole while the engine keeps serving; without a recorder
the toggle is refused, and the server ignores SIGUSR1 without a profile folder."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
from widebeam.services.decoder.engine import no_annotation
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.app import DecoderServer
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.timeline_recorder import TimelineRecorder


def request(i: int) -> GenerationRequest:
    return GenerationRequest(f"t{i}", (3, 4, i + 1), beam_width=4, n=4, constrained=True)


def test_toggles_write_one_summary_per_capture(sid_model: SidModel, tmp_path: Path) -> None:
    engine = sid_model.engine(max_rows=64, max_kv_slots=4096)
    recorder = TimelineRecorder(engine, tmp_path / "timelines")

    async def scenario() -> None:
        served = AsyncEngine(engine, max_waiting=16, timeline=recorder).start()
        try:
            for k in (1, 2):
                served.toggle_timeline()  # an idle engine thread wakes up for it
                wait_until(lambda: engine.annotate is not no_annotation, 10, "capture start")
                outs = await asyncio.gather(
                    *(served.generate(request(i), timeout=60) for i in range(3))
                )
                assert all(out.error is None and len(out.beams) == 4 for out in outs)
                served.toggle_timeline()
                path = tmp_path / "timelines" / f"timeline-{k}.json"
                wait_until(path.exists, 60, f"{path.name} to be written")
                summary = json.loads(path.read_text())
                assert summary["steps"] >= 3, summary  # 3 requests of 3 tokens: 3 steps at least
                assert {"prefill", "decode", "finish"} <= set(summary["host_ms_by_phase"])
                assert engine.annotate is no_annotation
            assert sorted(p.name for p in (tmp_path / "timelines").iterdir()) == [
                "timeline-1.json", "timeline-2.json"
            ]  # fmt: skip
        finally:
            served.stop()
            recorder.join(30)

    asyncio.run(scenario())


def test_shutdown_during_a_capture_ends_it_without_a_file(
    sid_model: SidModel, tmp_path: Path
) -> None:
    engine = sid_model.engine(max_rows=16, max_kv_slots=4096)
    recorder = TimelineRecorder(engine, tmp_path)
    served = AsyncEngine(engine, max_waiting=4, timeline=recorder).start()
    served.toggle_timeline()
    wait_until(lambda: engine.annotate is not no_annotation, 10, "capture start")
    served.stop()
    assert engine.annotate is no_annotation
    assert list(tmp_path.iterdir()) == []


def test_toggle_without_a_recorder_is_refused(sid_model: SidModel) -> None:
    served = AsyncEngine(sid_model.engine(max_rows=16, max_kv_slots=4096), max_waiting=4)
    with pytest.raises(RuntimeError, match="profile_dir is not set"):
        served.toggle_timeline()


def test_server_ignores_the_signal_without_a_profile_dir(
    sid_model: SidModel, caplog: pytest.LogCaptureFixture
) -> None:
    server = DecoderServer(make_settings(sid_model))
    with caplog.at_level(logging.WARNING):
        server.toggle_timeline()  # what SIGUSR1 calls
    assert "SIGUSR1 ignored: device timelines need --profile-dir" in caplog.text
    server = DecoderServer(make_settings(sid_model, profile_dir="/tmp/unused"))
    with caplog.at_level(logging.WARNING):
        server.toggle_timeline()  # before the engine is loaded
    assert "the engine is not loaded yet" in caplog.text
