"""What every search strategy's step hands back: which row each new row extends, with what
token (the engine then re-parents the rows' slot tables and trie nodes)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class StepSelection(NamedTuple):
    parents: torch.Tensor  # [k] int64, row index (of the previous step) each new row extends
    tokens: torch.Tensor  # [k] int64, the token each new row appends
