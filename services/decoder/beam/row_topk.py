"""Per-row top-`count` over a wide row (a vocabulary) without a full radix select.

A row's best `count` values lie in at most `count` blocks, and those blocks are among the
`count` blocks with the largest maxima. So: block maxima (one streaming pass), the best blocks
per row, then an exact top-`count` over just their values. For count ≪ vocab this reads the
row once instead of the several passes of `torch.topk`'s radix select.
"""

from __future__ import annotations

import torch

BLOCK = 64


def row_topk(
    x: torch.Tensor,  # [n, V] contiguous
    count: int,
    block: int = BLOCK,
) -> tuple[torch.Tensor, torch.Tensor]:  # [n, count] values (best first), [n, count] int64 cols
    n, vocab = x.shape
    blocks = vocab // block
    if count * block * 4 > vocab or not x.is_contiguous():  # too few blocks to gain anything
        return torch.topk(x, count, dim=1)
    main = x.as_strided((n, blocks, block), (vocab, block, 1))  # a view of the first blocks
    best_blocks = main.amax(dim=2).topk(count, dim=1).indices  # [n, count]
    values = main.gather(1, best_blocks[:, :, None].expand(n, count, block)).reshape(n, -1)
    cols = (best_blocks[:, :, None] * block + torch.arange(block, device=x.device)).reshape(n, -1)
    tail = blocks * block
    if tail < vocab:  # the last partial block competes directly
        values = torch.cat((values, x[:, tail:]), dim=1)
        cols = torch.cat((cols, torch.arange(tail, vocab, device=x.device).expand(n, -1)), dim=1)
    top, pick = torch.topk(values, count, dim=1)
    return top, cols.gather(1, pick)
