"""Triton kernel of `logits_stats`: grid (rows, vocabulary splits); each program streams its
part of a row once.

Lane b of a tile owns block slots b, b + TILE, ... and keeps its own running max and sum of
exponentials (online softmax), so no scalar is carried through the loop; the lanes are merged
at the end into the split's (max, sum), and the splits are merged by log-sum-exp. Few rows (a
narrow beam) get more splits so the grid still fills the GPU. Rows that are all -inf get
lse = -inf, never NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.beam.logits_stats import LogitsStats

TILE_BLOCKS = 32
TARGET_PROGRAMS = 4 * 132  # about four waves of an H100/H200's SMs


@triton.jit
def _logits_stats_kernel(
    x_ptr,  # [n, V] logits, unit stride along V
    part_max_ptr,  # [n, splits] fp32 the split's max
    part_sum_ptr,  # [n, splits] fp32 the split's sum of exp(x - max)
    block_max_ptr,  # [n, NB] fp32 (written when WRITE_BLOCKS)
    vocab,
    stride_x,
    num_blocks,
    split_len,  # vocabulary entries per split (a multiple of TILE * BLOCK)
    BLOCK: tl.constexpr,
    TILE: tl.constexpr,
    WRITE_BLOCKS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    base = x_ptr + row * stride_x
    lanes = tl.arange(0, TILE)
    within = tl.arange(0, BLOCK)
    run_max = tl.full([TILE], float("-inf"), tl.float32)
    run_sum = tl.zeros([TILE], tl.float32)
    begin = split * split_len
    end = tl.minimum(begin + split_len, vocab)
    for start in range(begin, end, TILE * BLOCK):
        cols = start + lanes[:, None] * BLOCK + within[None, :]  # [TILE, BLOCK]
        x = tl.load(base + cols, mask=cols < end, other=float("-inf")).to(tl.float32)
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
    tl.store(part_max_ptr + row * splits + split, top)
    tl.store(part_sum_ptr + row * splits + split, total)


def logits_stats_triton(logits: torch.Tensor, block: int = 64, blocks: bool = True) -> LogitsStats:
    n, vocab = logits.shape
    if logits.stride(1) != 1:
        raise ValueError("logits must have unit stride along the vocabulary")
    if block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    num_blocks = -(-vocab // block)
    tile = TILE_BLOCKS * block
    tiles = max(-(-vocab // tile), 1)
    splits = min(tiles, max(1, -(-TARGET_PROGRAMS // max(n, 1))))
    split_len = -(-tiles // splits) * tile
    splits = -(-vocab // split_len) if vocab else 1
    dev = logits.device
    part_max = torch.empty((n, splits), dtype=torch.float32, device=dev)
    part_sum = torch.empty((n, splits), dtype=torch.float32, device=dev)
    block_max = torch.empty((n, num_blocks) if blocks else (1, 1), dtype=torch.float32, device=dev)
    if n:
        _logits_stats_kernel[(n, splits)](
            logits, part_max, part_sum, block_max, vocab, logits.stride(0), num_blocks, split_len,
            BLOCK=block, TILE=TILE_BLOCKS, WRITE_BLOCKS=blocks, num_warps=8,
        )  # fmt: skip
    if splits == 1:
        lse = part_max[:, 0] + part_sum[:, 0].log()
    else:
        top = part_max.amax(dim=1, keepdim=True)
        safe = torch.where(torch.isneginf(top), 0.0, top)
        lse = safe[:, 0] + (part_sum * torch.exp(part_max - safe)).sum(dim=1).log()
    # an all -inf row: max -inf, sum 0 -> -inf + log 0; keep it -inf, never NaN
    lse = torch.where(torch.isneginf(part_max.amax(dim=1)), float("-inf"), lse)
    return LogitsStats(lse, block_max if blocks else None)
