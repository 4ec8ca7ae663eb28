"""On the GPU, CUDA-graph decode steps, beam expansions and prefills compute exactly what the
same padded steps compute eagerly, and overlap scheduling exactly what synchronous scheduling
computes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _requests(begin: int) -> list[GenerationRequest]:
    reqs = [
        # 20 tokens: past 16 its beams read their shared generated tokens once per ancestor
        GenerationRequest(
            "wide", (1, 2, 3, 4), beam_width=300, n=20, max_new_tokens=20, ignore_eos=True
        ),
        # EOS allowed and early stopping: stops are decided on the device, mid-flight
        GenerationRequest(
            "eos",
            (5, 6),
            beam_width=8,
            n=4,
            max_new_tokens=12,
            eos_token_id=(17, 23),
            early_stopping=True,
        ),
        *(
            GenerationRequest(
                name,
                (*prompt, begin),
                beam_width=k,
                n=n,
                max_new_tokens=5,
                constrained=True,
                return_logprobs=True,
                normalization=normalization,
            )
            for name, prompt, k, n, normalization in (
                ("sid", (9, 8), 64, 8, Normalization.VOCAB),  # the default
                ("sid-normalised", (7, 9), 48, 6, "sid"),
            )
        ),
        GenerationRequest("greedy", (6,), max_new_tokens=7, return_logprobs=True),
    ]
    reqs += [
        GenerationRequest(
            f"b{i}", tuple(range(i + 1, i + 30)), beam_width=4 + i, n=2, max_new_tokens=3 + i % 4
        )
        for i in range(6)
    ]
    return reqs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("wide", [False, True])  # wide: every beam request ranks blocks
def test_graph_eager_overlap_sync_digests_match(
    sid_model: SidModel, dtype: str, wide: bool
) -> None:
    results = {}
    for graphs, overlap in ((False, False), (True, False), (True, True)):
        engine = Engine(
            EngineConfig(
                model_dir=str(sid_model.model_dir),
                device="cuda",
                dtype=dtype,
                catalog_path=str(sid_model.catalog_path),
                cuda_graphs=graphs,
                overlap_scheduling=overlap,
                max_rows=400,  # requests queue and join mid-flight: buckets change per step
                dense_expansion_limit=0 if wide else 1 << 22,
            )
        )
        if wide:
            engine.step_policy = dataclasses.replace(engine.step_policy, one_pass_limit=0)
        outs = engine.generate(_requests(engine.sid_layout.begin_token_id))
        assert all(o.error is None for o in outs)
        assert engine.stats().rows_in_use == 0
        if graphs:
            assert engine.runner.graphs is not None and engine.runner.graphs.captures > 1
            prefill = engine.runner.prefill_graphs
            assert prefill is not None and prefill.captures >= 1
            if wide:  # (else every beam here is narrow enough to rank densely)
                assert engine.runner.expander.captures >= 1  # type: ignore[attr-defined]
        results[graphs, overlap] = digest(outs)
    assert len(set(results.values())) == 1, results


def test_prefill_graphs_give_the_eager_prefills_beams(sid_model: SidModel) -> None:
    """Padded (graph) prefills vs unpadded eager ones: the same beams in fp32 (the GEMMs see
    other row counts, so scores agree to rounding, not bit for bit)."""
    outputs = {}
    for prefill_graphs in (True, False):
        engine = Engine(
            EngineConfig(
                model_dir=str(sid_model.model_dir),
                device="cuda",
                catalog_path=str(sid_model.catalog_path),
                prefill_graphs=prefill_graphs,
            )
        )
        outputs[prefill_graphs] = engine.generate(_requests(engine.sid_layout.begin_token_id))
        assert (engine.runner.prefill_graphs is not None) == prefill_graphs
    for graph, eager in zip(outputs[True], outputs[False], strict=True):
        assert [b.output_ids for b in graph.beams] == [b.output_ids for b in eager.beams]
        for x, y in zip(graph.beams, eager.beams, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-4)
