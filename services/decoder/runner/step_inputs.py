"""What a decode step feeds the model, and the same step once prepared: its attention metadata
and, for a CUDA-graph step, the bucket it is padded to."""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

import torch

from widebeam.kernels.attention.metadata import DecodeBatch


class DecodeInputs(NamedTuple):
    tokens: torch.Tensor  # [R] int64, each row's pending token
    positions: torch.Tensor  # [R] int64
    write_slots: torch.Tensor  # [R] int64, the slot each row's new KV goes to
    batch: DecodeBatch


class DecodeShape(NamedTuple):
    """A decode bucket: one graph (one set of static buffers) serves every step of it."""

    rows: int  # padded row count
    attention: Hashable  # the backend's metadata capacities (its decode_bucket)


class PreparedStep(NamedTuple):
    inputs: DecodeInputs
    metadata: object  # the attention backend's prepare_decode result for the step
    shape: DecodeShape | None  # the bucket it is padded to; None: eager, at its own size
