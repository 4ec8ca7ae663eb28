"""Per-row statistics of a logits matrix that a wide beam needs, in one pass over the logits.

* `lse`: the log-sum-exp of every row over the full vocabulary (transformers normalises beam
  scores with a full log_softmax), so a candidate's log-prob is `logit - lse` without ever
  writing a [rows, vocab] fp32 log-prob matrix;
* `block_max`: the maximum of each `block` consecutive logits, so a row's top tokens can be
  found by looking only inside its best blocks (`services/decoder/search/beam_row_topk.py`).

The torch function is the reference (and the CPU path); on CUDA the Triton kernel reads the
model-dtype logits once.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

BLOCK = 64


class LogitsStats(NamedTuple):
    lse: torch.Tensor  # [n] fp32 log-sum-exp over the row (-inf for an all -inf row)
    block_max: torch.Tensor | None  # [n, ceil(V / block)] fp32, None unless asked for


def logits_stats_torch(
    logits: torch.Tensor, block: int = BLOCK, blocks: bool = True
) -> LogitsStats:
    x = logits.float()  # [n, V] fp32
    lse = torch.logsumexp(x, dim=1)
    if not blocks:
        return LogitsStats(lse, None)
    n, vocab = x.shape
    padded = -(-vocab // block) * block
    if padded != vocab:
        x = torch.nn.functional.pad(x, (0, padded - vocab), value=float("-inf"))
    return LogitsStats(lse, x.view(n, padded // block, block).amax(dim=2))


def logits_stats(logits: torch.Tensor, block: int = BLOCK, blocks: bool = True) -> LogitsStats:
    """logits: [n, V] (any float dtype, unit stride along V)."""
    if logits.is_cuda and logits.stride(1) == 1:
        from widebeam.kernels.beam.triton_logits_stats import logits_stats_triton

        return logits_stats_triton(logits, block, blocks)
    return logits_stats_torch(logits, block, blocks)
