"""On the GPU with `quantization="fp8"` (torch._scaled_mm): CUDA-graph decode steps, beam
expansions and prefills compute exactly what the same padded steps compute eagerly, overlap
scheduling what synchronous scheduling computes, and constrained beams are catalog SIDs; the
same with the LM head in FP8 (`head_quantization`)."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from tests.services.decoder.test_engine_graphs_gpu import _requests
from tests.services.decoder.test_fp8_engine import _constrained, _illegal_beams
from widebeam.kernels.fp8.backend import SCALED_MM, SCALED_MM_FAST

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("head", ["none", "fp8"])
def test_fp8_graph_eager_overlap_sync_digests_match(sid_model: SidModel, head: str) -> None:
    results = {}
    for graphs, overlap in ((False, False), (True, False), (True, True)):
        engine = sid_model.engine(
            device="cuda",
            dtype="bfloat16",
            quantization="fp8",
            head_quantization=head,
            cuda_graphs=graphs,
            overlap_scheduling=overlap,
            max_rows=400,
        )
        # fp8_accumulation's default: fast
        assert engine.model.model.layers[0].mlp.down_proj.gemm is SCALED_MM_FAST
        outs = engine.generate(_requests(engine.sid_layout.begin_token_id))
        assert all(o.error is None for o in outs)
        if graphs:
            assert engine.runner.graphs is not None and engine.runner.graphs.captures > 1
        results[graphs, overlap] = digest(outs)
    assert len(set(results.values())) == 1, results


@pytest.mark.parametrize("accumulation", ["fast", "precise"])
def test_fp8_constrained_beams_are_catalog_sids_on_cuda(
    sid_model: SidModel, accumulation: str
) -> None:
    engine = sid_model.engine(
        device="cuda", dtype="bfloat16", quantization="fp8", fp8_accumulation=accumulation
    )
    gemm = SCALED_MM_FAST if accumulation == "fast" else SCALED_MM
    assert engine.model.model.layers[0].self_attn.o_proj.gemm is gemm
    outputs = engine.generate([_constrained(i, w) for i, w in enumerate((1, 8, 64, 200))])
    assert [len(o.beams) for o in outputs] == [1, 8, 64, 200]
    assert _illegal_beams(engine, sid_model, outputs) == 0


def test_fp8_head_constrained_beams_are_catalog_sids_on_cuda(sid_model: SidModel) -> None:
    engine = sid_model.engine(
        device="cuda", dtype="bfloat16", quantization="fp8", head_quantization="fp8"
    )
    assert engine.model.head_fp8 is not None and engine.model.head_fp8.gemm is SCALED_MM_FAST
    outputs = engine.generate([_constrained(i, w) for i, w in enumerate((1, 8, 64, 200))])
    assert [len(o.beams) for o in outputs] == [1, 8, 64, 200]
    assert _illegal_beams(engine, sid_model, outputs) == 0
