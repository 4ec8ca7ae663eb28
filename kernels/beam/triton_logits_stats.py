"""Triton kernel of `logits_stats`: one program per row streams the row's logits once.

Lane b of a tile owns block slots b, b + TILE, ... and keeps its own running max and sum of
exponentials (online softmax), so no scalar is carried through the loop; the lanes are merged
at the end. Rows that are all -inf get lse = -inf, never NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.beam.logits_stats import LogitsStats

TILE_BLOCKS = 32


@triton.jit
def _logits_stats_kernel(
    x_ptr,  # [n, V] logits, unit stride along V
    lse_ptr,  # [n] fp32
    block_max_ptr,  # [n, NB] fp32 (written when WRITE_BLOCKS)
    vocab,
    stride_x,
    num_blocks,
    BLOCK: tl.constexpr,
    TILE: tl.constexpr,
    WRITE_BLOCKS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride_x
    lanes = tl.arange(0, TILE)
    within = tl.arange(0, BLOCK)
    run_max = tl.full([TILE], float("-inf"), tl.float32)
    run_sum = tl.zeros([TILE], tl.float32)
    for start in range(0, vocab, TILE * BLOCK):
        cols = start + lanes[:, None] * BLOCK + within[None, :]  # [TILE, BLOCK]
        x = tl.load(base + cols, mask=cols < vocab, other=float("-inf")).to(tl.float32)
        tile_max = tl.max(x, axis=1)  # [TILE]
        if WRITE_BLOCKS:
            ids = start // BLOCK + lanes
            tl.store(block_max_ptr + row * num_blocks + ids, tile_max, mask=ids < num_blocks)
        new_max = tl.maximum(run_max, tile_max)
        safe = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe) + tl.sum(tl.exp(x - safe[:, None]), axis=1)
        run_max = new_max
    top = tl.max(run_max, axis=0)
    top_safe = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(run_sum * tl.exp(run_max - top_safe), axis=0)
    tl.store(lse_ptr + row, top_safe + tl.log(total))


def logits_stats_triton(logits: torch.Tensor, block: int = 64, blocks: bool = True) -> LogitsStats:
    n, vocab = logits.shape
    if logits.stride(1) != 1:
        raise ValueError("logits must have unit stride along the vocabulary")
    if block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    num_blocks = -(-vocab // block)
    lse = torch.empty(n, dtype=torch.float32, device=logits.device)
    block_max = torch.empty(
        (n, num_blocks) if blocks else (1, 1), dtype=torch.float32, device=logits.device
    )
    if n:
        _logits_stats_kernel[(n,)](
            logits, lse, block_max, vocab, logits.stride(0), num_blocks,
            BLOCK=block, TILE=TILE_BLOCKS, WRITE_BLOCKS=blocks, num_warps=8,
        )  # fmt: skip
    return LogitsStats(lse, block_max if blocks else None)
