"""FP8 probabilities (the engine's `kv_fp8_probabilities`): attention's P V on FP8 tensor cores.

P is rounded to float8_e4m3fn against the row's maximum score rounded up to an integer (log2
units): the kernels' online softmax rescales earlier tiles by powers of two only, so each
probability rounds the same way whatever the key tiles and prompt splits, and the torch
reference can round them in one pass (`rounded_probabilities`). P is at most 1; it is
multiplied by FP8_P_SCALE before the cast so that values down to 2^-14 stay normal e4m3
numbers, and the sum that normalizes the output is the unrounded probabilities'.
"""

from __future__ import annotations

import math

import torch

from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE

FP8_P_SCALE = 256.0  # a power of two: dividing the output by it again is exact


def rounded_probabilities(
    scores: torch.Tensor,  # [..., T] fp32 natural-log units (softmax scale applied), -inf hidden
) -> torch.Tensor:  # [..., T] fp32: the softmax with each term rounded as the kernels round it
    """softmax(scores) as FP8 probabilities give it: each exp2(s - ceil(max s)) (s in log2
    units) rounded to e4m3 after FP8_P_SCALE, over the unrounded terms' sum. A row that sees no
    key is all zeros."""
    if scores.shape[-1] == 0:  # no key at all
        return torch.zeros_like(scores)
    s = scores / math.log(2.0)
    top = torch.ceil(s.amax(dim=-1, keepdim=True))
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp2(s - top)
    rounded = (p * FP8_P_SCALE).to(KV_FP8_DTYPE).float() / FP8_P_SCALE
    total = p.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, rounded / torch.where(total > 0, total, 1.0), 0.0)
