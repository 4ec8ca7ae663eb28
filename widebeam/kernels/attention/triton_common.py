"""Shared helpers of the Triton attention kernels: tile choices, precision, interpreter check."""

from __future__ import annotations

import math

import torch
import triton

LOG2E = 1.4426950408889634  # kernels work in log2 units: exp2 is the cheap instruction


def interpreting(kernel: object) -> bool:
    """True under TRITON_INTERPRET=1 (the kernel was decorated as an InterpretedFunction).
    The interpreter's tl.dot reads bf16 as raw integers, so kernels upcast operands there."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 engines are the accuracy reference: keep their dots exact. Ignored for bf16/fp16."""
    return "ieee" if dtype == torch.float32 else "tf32"


def gqa_padded(q_heads: int, kv_heads: int) -> int:
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads are not a multiple of {kv_heads} kv heads")
    return triton.next_power_of_2(q_heads // kv_heads)


def default_block_rows(q_heads: int, kv_heads: int, max_group_rows: int) -> int:
    """Rows per prefix block: M = rows × padded GQA in [16, 64]; fewer rows for small groups
    so k = 1 requests do not pay for 64-row tiles."""
    gqa_p = gqa_padded(q_heads, kv_heads)
    want = triton.next_power_of_2(max(max_group_rows, 1))
    return max(16 // gqa_p, 1, min(want, max(64 // gqa_p, 1)))


def default_num_splits(programs: int, max_prompt_len: int, device: torch.device) -> int:
    """Split long prompts until the prefix grid fills the GPU (~2 waves), keeping >= 256
    tokens per split so the extra partials stay cheap."""
    if device.type != "cuda" or programs <= 0:
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(math.ceil(2 * sms / programs), max_prompt_len // 256))
