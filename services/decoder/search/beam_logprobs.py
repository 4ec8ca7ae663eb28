"""Logits -> the processed log-probs beam search ranks (transformers' order of operations)."""

from __future__ import annotations

import torch


def processed_logprobs(
    logits: torch.Tensor,  # [rows, vocab] fp32
    constraint_mask: torch.Tensor | None,  # [rows, vocab] fp32 additive (0 / -inf)
    eos_ids: torch.Tensor,  # [n_eos] int64
    block_eos: bool,  # min_new_tokens not reached yet
) -> torch.Tensor:  # [rows, vocab] fp32
    logprobs = torch.log_softmax(logits, dim=-1)
    if block_eos and eos_ids.numel():
        logprobs[:, eos_ids] = float("-inf")
    if constraint_mask is not None:
        logprobs = logprobs + constraint_mask
    return logprobs
