"""What a decode step feeds the model, and the same step once prepared for a CUDA-graph bucket."""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.kernels.attention.metadata import DecodeBatch


class DecodeInputs(NamedTuple):
    tokens: torch.Tensor  # [R] int64, each row's pending token
    positions: torch.Tensor  # [R] int64
    write_slots: torch.Tensor  # [R] int64, the slot each row's new KV goes to
    batch: DecodeBatch
