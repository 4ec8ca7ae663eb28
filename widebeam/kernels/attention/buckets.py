"""Capacities of a decode batch's attention metadata, rounded up for CUDA-graph buckets.

A captured decode step reads metadata buffers of fixed sizes. `decode_capacity` rounds a batch's
request count, widest request, longest prompt and suffix length up to powers of two (the
FlashInfer backend's buckets): few buckets serve every batch, and every batch of a bucket fits
its buffers. The Triton backend needs less (only the suffix bucket, MIN_SUFFIX at least, and a
work-item rung: `triton_backend.py`). The runner rounds the row count itself
(`runner/decode_graphs.row_bucket`).
"""

from __future__ import annotations

from typing import NamedTuple

from widebeam.kernels.attention.metadata import DecodeBatch

MIN_SUFFIX = 8  # suffix capacity floor: the first decode steps share one bucket


def pow2(n: int, floor: int = 1) -> int:
    """The smallest power of two >= n, and >= floor."""
    return max(floor, 1 << max(n - 1, 0).bit_length())


class DecodeCapacity(NamedTuple):
    groups: int  # request (group) capacity
    widest: int  # rows of the widest group, rounded up
    prompt_tokens: int  # prompt tokens of the longest prompt, rounded up
    suffix: int  # generated slots per row


def decode_capacity(batch: DecodeBatch) -> DecodeCapacity:
    groups = batch.groups
    widest = max((g.num_rows for g in groups), default=1)
    longest = max((int(g.prompt_slots.shape[0]) for g in groups), default=0)
    suffix = max((int(g.suffix_slots.shape[1]) for g in groups), default=0)
    return DecodeCapacity(pow2(len(groups)), pow2(widest), pow2(longest), pow2(suffix, MIN_SUFFIX))
