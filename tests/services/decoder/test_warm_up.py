"""The start-up capture list's warm-up requests on a CPU stand-in: for a CUDA configuration's
list, every synthetic request is one the engine accepts and finishes (so the warm-up on the
device fails on no bucket), and a CPU engine's warm-up does nothing (no graphs to capture)."""

from __future__ import annotations

import dataclasses

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.runner.capture_counts import GraphKind
from widebeam.services.decoder.runner.capture_plan import startup_captures, warm_up_requests


def test_every_warm_up_request_of_the_cuda_list_runs(sid_model: SidModel) -> None:
    config = sid_model.engine_config(max_rows=64, max_kv_slots=16384)
    # The CPU stand-in's attention is dense in each prompt's length: prefill buckets up to 2,048
    # tokens and prompts of at most 1,023 keep it small, and still fill a bucket with several
    # prompts as the warm-up does wherever the context is shorter than the bucket.
    cuda = dataclasses.replace(
        config, device="cuda", capture_at_start=True, capture_beam_widths=(5, 40),
        max_prefill_graph_tokens=2048,
    )  # fmt: skip
    plan = startup_captures(cuda)
    assert {b.kind for b in plan} == {GraphKind.DECODE, GraphKind.PREFILL, GraphKind.EXPANSION}
    engine = sid_model.engine(max_rows=64, max_kv_slots=16384)
    assert engine.constraint is not None
    path = engine.constraint.path_length((0,))
    context = min(1024, engine.limits.max_model_len)
    requests = [
        request for bucket in plan for request in warm_up_requests(bucket, cuda, context, path)
    ]
    assert max(len(r.input_ids) for r in requests) == context - 1
    assert len([r for r in requests if "prefill-2048" in r.request_id]) == 3
    for request, out in zip(requests, engine.generate(requests), strict=True):
        assert out.ok, (request.request_id, out.error)
        assert out.beams
        if request.constrained:
            assert all(beam.item_ids for beam in out.beams)  # real catalog paths


def test_cpu_warm_up_captures_nothing(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=64, max_kv_slots=16384)
    assert engine.warm_up() == 0.0
    assert sum(engine.runner.capture_counts.counts.values()) == 0
    engine.mark_ready()
    assert engine.runner.capture_counts.ready
