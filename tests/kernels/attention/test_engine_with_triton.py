"""The engine computes the same beams with the Triton attention backend as with the torch
reference (compiled on CUDA, interpreted on the CPU)."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.kernels.attention.factory import resolve_backend_name, triton_available
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest

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


def test_padded_prefill_buckets_match_the_eager_prefill(
    sid_model: SidModel, kernel_device: object
) -> None:
    """What a prefill graph replays (tokens padded to the bucket as one extra segment writing the
    trash slot) gives the real prompts the same last-token states and the same KV."""
    import torch

    from widebeam.services.decoder.runner.prefill_graphs import PrefillGraphs

    config = EngineConfig(
        model_dir=str(sid_model.model_dir), device=str(kernel_device), attention_backend="triton"
    )
    engine = Engine(config)
    runner = engine.runner
    device = torch.device(str(kernel_device))
    padded = PrefillGraphs(
        runner._prefill_forward,
        runner.backend,
        runner.layout,
        trash_slot=engine.limits.max_kv_slots,
        device=device,
        use_graphs=False,
    )
    prompts = [tuple(range(3, 40)), (5, 6), tuple(range(100, 170))]
    total = sum(len(p) for p in prompts)
    starts = [0, 37, 39]
    eager_slots = [
        torch.arange(s, s + len(p), device=device) for s, p in zip(starts, prompts, strict=True)
    ]
    padded_slots = [s + 200 for s in eager_slots]
    expected = runner.prefill(prompts, eager_slots)
    got = padded.run(prompts, padded_slots)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    cache = runner.cache
    torch.testing.assert_close(cache.k[:, 200 : 200 + total], cache.k[:, :total])
    torch.testing.assert_close(cache.v[:, 200 : 200 + total], cache.v[:, :total])
    assert not cache.k[:, total:200].any()  # padding tokens wrote only the trash slot


def test_prefill_over_cached_prefix_pages_matches_the_whole_prefill(
    sid_model: SidModel, kernel_device: object
) -> None:
    """The prefix cache's prefill with the Triton backend (its prefill kernel over the whole
    prompt's K/V gathered from the cache, zero queries at the cached positions): the suffix's
    last-token states and KV equal those of a prefill of the whole prompt."""
    import torch

    config = EngineConfig(
        model_dir=str(sid_model.model_dir), device=str(kernel_device), attention_backend="triton"
    )
    runner = Engine(config).runner
    device = torch.device(str(kernel_device))
    prompts = [tuple(range(3, 40)), tuple(range(100, 150)), tuple(range(50, 67))]
    cached = [32, 16, 16]
    whole = [torch.arange(64 * i, 64 * i + len(p), device=device) for i, p in enumerate(prompts)]
    expected = runner.prefill(prompts, whole)
    reference_k, reference_v = runner.cache.k.clone(), runner.cache.v.clone()
    # Second copies: the cached prefixes are the first prompts' slots, the suffixes new ones.
    again = [
        torch.cat((s[:c], torch.arange(1000 + 64 * i, 1000 + 64 * i + len(p) - c, device=device)))
        for i, (s, p, c) in enumerate(zip(whole, prompts, cached, strict=True))
    ]
    got = runner.prefill(prompts, again, cached)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for s_whole, s_again, c in zip(whole, again, cached, strict=True):
        torch.testing.assert_close(runner.cache.k[:, s_again[c:]], reference_k[:, s_whole[c:]])
        torch.testing.assert_close(runner.cache.v[:, s_again[c:]], reference_v[:, s_whole[c:]])


def test_shared_suffix_attention_keeps_the_beams(
    sid_model: SidModel, kernel_device: object
) -> None:
    """Generations long enough for beams to share generated tokens (>= 16): the Triton backend
    with the shared-suffix plan, without it, and the torch reference find the same beams."""
    request = GenerationRequest(
        "long", (3, 1, 4, 1, 5), beam_width=6, n=6, max_new_tokens=20, ignore_eos=True
    )
    outputs = {}
    for name, backend, shared in (
        ("torch", "torch", True), ("shared", "triton", True), ("alone", "triton", False)
    ):  # fmt: skip
        config = EngineConfig(
            model_dir=str(sid_model.model_dir), device=str(kernel_device),
            attention_backend=backend, shared_suffix_attention=shared,
        )  # fmt: skip
        outputs[name] = Engine(config).generate([request])[0]
    for name in ("shared", "alone"):
        assert [b.output_ids for b in outputs[name].beams] == [
            b.output_ids for b in outputs["torch"].beams
        ], name
        for x, y in zip(outputs["torch"].beams, outputs[name].beams, strict=True):
            assert x.score == pytest.approx(y.score, abs=1e-4)
    assert len(outputs["shared"].beams[0].output_ids) == 20
