"""Next-token choice for ordinary (beam width 1) requests: greedy, or sampling.

Greedy equals transformers' greedy search (argmax of the processed scores). Sampling applies
temperature, then top-k, then top-p (transformers' warper order) and draws from a per-request
generator, so a seeded request gives the same tokens whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float | None = None  # None or 0: greedy
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return not self.temperature


def choose_token(
    logits: torch.Tensor,  # [vocab] fp32 raw logits
    mask: torch.Tensor | None,  # [vocab] fp32 additive (0 / -inf), or None
    params: SamplingParams,
    generator: torch.Generator | None,
) -> int:
    scores = logits if mask is None else logits + mask
    if params.greedy:
        return int(torch.argmax(scores))
    scores = scores / params.temperature
    if params.top_k:
        kth = torch.topk(scores, k=min(params.top_k, scores.numel()))[0][-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        # Drop the low tail whose total mass is at most 1 - top_p; always keep the best token.
        drop_sorted = cumulative <= (1.0 - params.top_p)
        drop_sorted[-1] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs.cpu(), num_samples=1, generator=generator))
