"""The engine with an FP8 KV cache computes the same beams with the Triton attention backend as
with the torch reference (compiled on CUDA, interpreted on the CPU): the contexts hand the
Triton prefill and cascade decode the layer's scales, as they do the reference."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.kernels.attention.factory import triton_available
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest

pytestmark = pytest.mark.skipif(not triton_available(), reason="triton is not installed")


@pytest.mark.parametrize(
    ("fp8_queries", "fp8_probabilities"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["queries", "fp8-queries", "fp8-probabilities", "fp8-both"],
)
def test_fp8_engine_results_equal_across_backends(
    sid_model: SidModel, kernel_device: object, fp8_queries: bool, fp8_probabilities: bool
) -> None:
    """`kv_fp8_queries` and `kv_fp8_probabilities` too: the Triton prefill and prefix kernels'
    FP8 queries and probabilities and the reference's rounded ones give the same beams."""
    requests = [
        GenerationRequest("greedy", tuple(range(7, 30)), max_new_tokens=3),
        GenerationRequest("sid", (9, 251), beam_width=4, n=4, max_new_tokens=5, constrained=True),
    ]
    outputs = {}
    for backend in ("torch", "triton"):
        config = sid_model.engine_config(
            device=str(kernel_device), attention_backend=backend, kv_dtype="fp8",
            kv_fp8_queries=fp8_queries, kv_fp8_probabilities=fp8_probabilities,
        )  # fmt: skip
        engine = Engine(config)
        backend_in_use = engine.runner.backend
        assert backend_in_use.fp8_queries is fp8_queries  # type: ignore[attr-defined]
        assert backend_in_use.fp8_probabilities is fp8_probabilities  # type: ignore[attr-defined]
        # with both, the prefill takes the cache's FP8 rows as stored (the reference: widened)
        fp8_rows = backend == "triton" and fp8_queries and fp8_probabilities
        assert backend_in_use.prefill_takes_fp8_rows is fp8_rows
        outputs[backend] = engine.generate(requests)
    for ref, got in zip(outputs["torch"], outputs["triton"], strict=True):
        assert ref.error is None and got.error is None
        assert [b.output_ids for b in ref.beams] == [b.output_ids for b in got.beams]
        for x, y in zip(ref.beams, got.beams, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-4)
