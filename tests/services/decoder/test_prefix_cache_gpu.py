"""On the GPU (Triton attention, CUDA graphs): the prefix cache gives the same answers as no
cache, and with it graph and eager engines still compute exactly the same thing (batches with a
cached prefix prefill eagerly, the others from prefill graphs)."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from tests.services.decoder.test_prefix_cache import _one_by_one, _requests, _same_answers

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_prefix_cache_on_the_gpu(sid_model: SidModel) -> None:
    cached = sid_model.engine(device="cuda")
    plain = sid_model.engine(device="cuda", prefix_cache=False)
    requests = _requests(cached.sid_layout.begin_token_id, seed=1, count=12)
    _same_answers(_one_by_one(cached, requests), _one_by_one(plain, requests))
    _same_answers(cached.generate(requests), plain.generate(requests))
    assert cached.scheduler.kv.stats().hit_tokens > 0


def test_graph_equals_eager_with_the_prefix_cache(sid_model: SidModel) -> None:
    graphs = sid_model.engine(device="cuda")
    eager = sid_model.engine(device="cuda", cuda_graphs=False)
    assert graphs.runner.uses_graphs
    requests = _requests(graphs.sid_layout.begin_token_id, seed=7, count=12)
    assert digest(graphs.generate(requests)) == digest(eager.generate(requests))
    assert digest(_one_by_one(graphs, requests)) == digest(_one_by_one(eager, requests))
    assert graphs.scheduler.kv.stats().hit_tokens > 0


def test_warm_up_fills_every_prefill_bucket_and_caches_nothing(sid_model: SidModel) -> None:
    """Warm-up prompts share their zeros: with reuse, larger prefill buckets would be hits that
    prefill eagerly and leave their graphs to be captured while serving."""
    engine = sid_model.engine(device="cuda", capture_at_start=True)
    engine.warm_up()
    engine.mark_ready()
    assert engine.scheduler.kv.enabled and engine.scheduler.kv.tree.num_nodes == 0
    assert engine.scheduler.kv.stats().hit_tokens == 0
