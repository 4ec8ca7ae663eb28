from __future__ import annotations

import torch

from widebeam.services.decoder.search.sampling import SamplingParams, choose_token


def test_seeded_sampling_is_reproducible_and_varies_with_seed() -> None:
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))

    def draw(seed: int) -> list[int]:
        gen = torch.Generator().manual_seed(seed)
        return [choose_token(logits, None, SamplingParams(1.0, seed=seed), gen) for _ in range(20)]

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)


def test_top_k_one_and_tiny_top_p_are_greedy() -> None:
    logits = torch.randn(50, generator=torch.Generator().manual_seed(1))
    best = int(torch.argmax(logits))
    gen = torch.Generator().manual_seed(0)
    assert choose_token(logits, None, SamplingParams(2.0, top_k=1), gen) == best
    assert choose_token(logits, None, SamplingParams(2.0, top_p=1e-6), gen) == best
    assert choose_token(logits, None, SamplingParams(None), None) == best


def test_mask_is_respected() -> None:
    logits = torch.zeros(10)
    mask = torch.full((10,), float("-inf"))
    mask[[2, 7]] = 0.0
    gen = torch.Generator().manual_seed(0)
    draws = {choose_token(logits, mask, SamplingParams(1.0), gen) for _ in range(50)}
    assert draws == {2, 7}
