"""Each row's best log-probs from model-dtype logits, its log-sum-exp and its block maxima.

A row's best `count` tokens lie in at most `count` blocks, and those blocks are among the
`count` blocks with the largest maxima (`widebeam/kernels/beam/logits_stats.py` computes the
maxima in the same pass as the log-sum-exp). Banned tokens (EOS before min_new_tokens) may hold a
block's maximum, so one extra block per banned token keeps the result exact. Only the chosen
blocks are read again and turned into fp32 log-probs: the [rows, vocab] fp32 matrix never
exists.
"""

from __future__ import annotations

import torch

from widebeam.kernels.beam.logits_stats import BLOCK


def top_in_blocks(
    logits: torch.Tensor,  # [n, V] model dtype
    lse: torch.Tensor,  # [n] fp32 log-sum-exp of each row
    block_max: torch.Tensor,  # [n, ceil(V / block)] fp32
    count: int,
    banned: torch.Tensor,  # [m] int64 tokens scored -inf (after normalisation)
    block: int = BLOCK,
) -> tuple[torch.Tensor, torch.Tensor]:  # [n, count] fp32 log-probs best first, [n, count] int64
    n, vocab = logits.shape
    blocks = min(block_max.shape[1], count + banned.numel())
    if blocks * block * 2 > vocab:  # most of the row anyway: rank it whole
        values = logits.float() - lse[:, None]  # [n, V] fp32, a chunk of rows only
        if banned.numel():
            values[:, banned] = float("-inf")
        return torch.topk(values, count, dim=1)
    best = block_max.topk(blocks, dim=1).indices  # [n, blocks]
    cols = (best[:, :, None] * block + torch.arange(block, device=logits.device)).reshape(n, -1)
    inside = cols < vocab
    values = logits.gather(1, cols.clamp(max=vocab - 1)).float() - lse[:, None]
    invalid = ~inside
    if banned.numel():
        invalid |= torch.isin(cols, banned)
    top, pick = torch.topk(values.masked_fill(invalid, float("-inf")), count, dim=1)
    return top, cols.gather(1, pick)
