"""On the GPU, `Engine.warm_up` captures the start-up list's graphs before ready: requests that
fall in the listed buckets capture nothing while serving, a shape beyond the list is captured
and counted as a capture while serving, and a warmed-up engine computes what a cold one does."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.capture_counts import CapturePhase, GraphKind
from widebeam.services.decoder.runner.capture_plan import startup_captures

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _engine(sid_model: SidModel, **overrides: object) -> Engine:
    fields = {
        "device": "cuda", "max_rows": 256, "max_kv_slots": 1 << 16, "capture_at_start": True
    } | overrides  # fmt: skip
    return sid_model.engine(**fields)


def _recommend_like(engine: Engine, widths: tuple[int, ...]) -> list[GenerationRequest]:
    """Shaped like the decoder's Recommend calls (n = beam, no EOS, constrained), as the
    warm-up's are, at the widths of listed row buckets."""
    assert engine.constraint is not None
    steps = engine.constraint.path_length((3, 4, 5))
    return [
        GenerationRequest(
            f"r{k}", (3, 4, 5), beam_width=k, n=k, max_new_tokens=steps, eos_token_id=(),
            constrained=True,
        )
        for k in widths
    ]  # fmt: skip


def test_warm_up_captures_the_list_and_serving_then_captures_nothing(sid_model: SidModel) -> None:
    engine = _engine(sid_model, dense_expansion_limit=0)  # every beam takes the streamed path
    plan = startup_captures(engine.config)
    assert engine.warm_up() > 0
    counts = engine.runner.capture_counts
    decode = sum(1 for b in plan if b.kind == GraphKind.DECODE)
    assert counts.counts[GraphKind.DECODE, CapturePhase.STARTUP] >= decode
    assert counts.counts[GraphKind.EXPANSION, CapturePhase.STARTUP] >= decode
    assert counts.counts[GraphKind.PREFILL, CapturePhase.STARTUP] >= 1
    engine.mark_ready()
    for request in _recommend_like(engine, (8, 64, 256)):  # one at a time: listed buckets
        [out] = engine.generate([request])
        assert out.ok and out.beams
    assert counts.total(CapturePhase.SERVING) == 0, counts.counts
    # Two requests at once: a batch of two groups, a decode bucket the list holds as well
    # (decode buckets do not depend on how the rows split into requests).
    assert all(out.ok for out in engine.generate(_recommend_like(engine, (8, 64))))
    assert counts.counts[GraphKind.DECODE, CapturePhase.SERVING] == 0
    # A generation longer than a SID path: a suffix bucket the list does not hold.
    long = GenerationRequest("long", (3, 4, 5), max_new_tokens=12, eos_token_id=())
    [out] = engine.generate([long])
    assert out.ok
    assert counts.counts[GraphKind.DECODE, CapturePhase.SERVING] >= 1


def test_a_warmed_up_engine_gives_a_cold_engines_results(sid_model: SidModel) -> None:
    warm = _engine(sid_model)
    warm.warm_up()
    cold = _engine(sid_model)
    requests = _recommend_like(warm, (8, 40, 200))
    assert digest(warm.generate(requests)) == digest(cold.generate(requests))


def test_capture_at_start_off_captures_nothing_at_warm_up(sid_model: SidModel) -> None:
    engine = _engine(sid_model, capture_at_start=False)
    engine.warm_up()
    assert sum(engine.runner.capture_counts.counts.values()) == 0
