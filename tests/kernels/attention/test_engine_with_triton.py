"""The engine computes the same beams with the Triton attention backend as with the torch
reference (compiled on CUDA, interpreted on the CPU)."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.kernels.attention.factory import resolve_backend_name, triton_available
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.request import GenerationRequest

pytestmark = pytest.mark.skipif(not triton_available(), reason="triton is not installed")


def test_auto_picks_triton_only_on_cuda() -> None:
    assert resolve_backend_name("auto", "cpu") == "torch"
    assert resolve_backend_name("auto", "cuda") == "triton"
    assert resolve_backend_name("torch", "cuda") == "torch"


def test_engine_results_equal_across_backends(sid_model: SidModel, kernel_device: object) -> None:
    requests = [
        GenerationRequest("beam", (1, 2, 3, 4, 5), beam_width=4, n=3, max_new_tokens=3),
        GenerationRequest("greedy", (7, 8), max_new_tokens=3),
        GenerationRequest("sid", (9, 251), beam_width=4, n=4, max_new_tokens=5, constrained=True),
    ]
    outputs = {}
    for backend in ("torch", "triton"):
        config = EngineConfig(
            model_dir=str(sid_model.model_dir),
            device=str(kernel_device),
            catalog_path=str(sid_model.catalog_path),
            attention_backend=backend,
        )
        outputs[backend] = Engine(config).generate(requests)
    for ref, got in zip(outputs["torch"], outputs["triton"], strict=True):
        assert [b.output_ids for b in ref.beams] == [b.output_ids for b in got.beams]
        for x, y in zip(ref.beams, got.beams, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-4)
