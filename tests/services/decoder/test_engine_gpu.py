"""On CUDA the reference engine computes the same beams as on CPU (fp32)."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_engine_matches_cpu(sid_model: SidModel) -> None:
    begin = 251
    requests = [
        GenerationRequest("b", (1, 2, 3), beam_width=16, n=4, max_new_tokens=5),
        GenerationRequest(
            "c", (4, 5, begin), beam_width=64, n=8, max_new_tokens=5, constrained=True
        ),
        GenerationRequest(
            "s",
            (7, 8, begin),
            beam_width=300,  # streamed: the sub-vocabulary GEMM
            n=8,
            max_new_tokens=5,
            constrained=True,
            normalization="sid",
        ),
        GenerationRequest("g", (6,), max_new_tokens=4),
    ]
    outs = {}
    for device in ("cpu", "cuda"):  # cuda: "auto" picks the Triton attention kernels
        engine = Engine(
            EngineConfig(
                model_dir=str(sid_model.model_dir),
                device=device,
                catalog_path=str(sid_model.catalog_path),
            )
        )
        assert engine.sid_layout.begin_token_id == begin
        outs[device] = engine.generate(requests)
    for cpu, gpu in zip(outs["cpu"], outs["cuda"], strict=True):
        assert [b.output_ids for b in cpu.beams] == [b.output_ids for b in gpu.beams]
        for x, y in zip(cpu.beams, gpu.beams, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-3)
            assert x.item_ids == y.item_ids
