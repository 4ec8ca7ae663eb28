"""On the GPU with `kv_dtype="fp8"` (Triton kernels reading float8_e4m3fn K and V with per-head
scales): CUDA-graph decode steps, beam expansions and prefills compute exactly what the same
padded steps compute eagerly, overlap scheduling what synchronous scheduling computes; beams
are catalog SIDs; prefix hits answer as misses; with W8A8 linears too; and a memory fraction
holds twice bfloat16's slots."""

from __future__ import annotations

import gc

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from tests.services.decoder.test_engine_graphs_gpu import _requests
from tests.services.decoder.test_fp8_engine import _constrained, _illegal_beams
from tests.services.decoder.test_fp8_kv_engine import _same_answers
from tests.services.decoder.test_prefix_cache import _one_by_one
from tests.services.decoder.test_prefix_cache import _requests as _prefix_requests
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize(
    ("dtype", "quantization"),
    [("bfloat16", "none"), ("float32", "none"), ("bfloat16", "fp8")],
)
def test_fp8_kv_graph_eager_overlap_sync_digests_match(
    sid_model: SidModel, dtype: str, quantization: str
) -> None:
    results = {}
    for graphs, overlap in ((False, False), (True, False), (True, True)):
        engine = sid_model.engine(
            device="cuda",
            dtype=dtype,
            quantization=quantization,
            kv_dtype="fp8",
            cuda_graphs=graphs,
            overlap_scheduling=overlap,
            max_rows=400,  # requests queue and join mid-flight: buckets change per step
        )
        assert engine.runner.cache.k.dtype == KV_FP8_DTYPE
        assert engine.runner.backend.name == "triton"
        outs = engine.generate(_requests(engine.sid_layout.begin_token_id))
        assert all(o.error is None for o in outs)
        if graphs:
            assert engine.runner.graphs is not None and engine.runner.graphs.captures > 1
            prefill = engine.runner.prefill_graphs
            assert prefill is not None and prefill.captures >= 1
        results[graphs, overlap] = digest(outs)
    assert len(set(results.values())) == 1, results


@pytest.mark.parametrize("quantization", ["none", "fp8"])
def test_fp8_kv_constrained_beams_are_catalog_sids_on_cuda(
    sid_model: SidModel, quantization: str
) -> None:
    engine = sid_model.engine(
        device="cuda", dtype="bfloat16", quantization=quantization, kv_dtype="fp8"
    )
    outputs = engine.generate([_constrained(i, w) for i, w in enumerate((1, 8, 64, 200))])
    assert [len(o.beams) for o in outputs] == [1, 8, 64, 200]
    assert _illegal_beams(engine, sid_model, outputs) == 0


@pytest.mark.parametrize(("fp8_queries", "fp8_probabilities"), [(False, False), (True, True)])
def test_fp8_kv_prefix_hits_answer_as_misses_on_cuda(
    sid_model: SidModel, fp8_queries: bool, fp8_probabilities: bool
) -> None:
    """Hits in prefill graphs (the cached positions recomputed into the trash slot) and eager
    hits (`prefill_graphs=False`: the suffix-only path reading FP8 pages), FP8 queries and
    probabilities too."""
    for prefill_graphs in (True, False):
        options = {
            "device": "cuda", "kv_dtype": "fp8", "prefill_graphs": prefill_graphs,
            "kv_fp8_queries": fp8_queries, "kv_fp8_probabilities": fp8_probabilities,
        }  # fmt: skip
        cached = sid_model.engine(**options)
        plain = sid_model.engine(prefix_cache=False, **options)
        requests = _prefix_requests(cached.sid_layout.begin_token_id, seed=1, count=12)
        _same_answers(_one_by_one(cached, requests), _one_by_one(plain, requests))
        assert cached.scheduler.kv.stats().hit_tokens > 0


def test_a_memory_fraction_holds_twice_the_slots(sid_model: SidModel) -> None:
    slots = {}
    for kv_dtype in ("auto", "fp8"):
        engine = sid_model.engine(
            device="cuda", dtype="bfloat16", kv_dtype=kv_dtype, kv_memory_fraction=0.05
        )
        slots[kv_dtype] = engine.limits.max_kv_slots
        del engine
        gc.collect()  # the next engine measures the memory this one's cache held as free
        torch.cuda.empty_cache()
    assert 1.9 * slots["auto"] <= slots["fp8"] <= 2.1 * slots["auto"], slots
