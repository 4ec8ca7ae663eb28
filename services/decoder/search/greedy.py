"""Ordinary (beam width 1) decoding with the same step interface as `BeamSearch`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from widebeam.services.decoder.requests.results import FinishedBeams
from widebeam.services.decoder.search.sampling import SamplingParams, choose_token
from widebeam.services.decoder.search.step_selection import StepSelection


@dataclass
class GreedySearch:
    params: SamplingParams
    length_penalty: float
    eos_ids: torch.Tensor  # [n_eos] int64
    max_new_tokens: int
    min_new_tokens: int
    device: torch.device
    step: int = 0
    done: bool = False
    tokens: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    cum_logprob: torch.Tensor | None = None  # [] fp32, accumulated like beam scores

    def __post_init__(self) -> None:
        seed = self.params.seed
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.cum_logprob = torch.zeros((), dtype=torch.float32)
        self._eos = set(self.eos_ids.tolist())

    def advance(self, logits: torch.Tensor, mask: torch.Tensor | None) -> StepSelection:
        """logits: [1, vocab] fp32; mask: [1, vocab] additive or None."""
        row_mask = mask[0] if mask is not None else None
        if self.step < self.min_new_tokens and self.eos_ids.numel():
            eos_mask = torch.zeros(logits.shape[1], device=logits.device)
            eos_mask[self.eos_ids] = float("-inf")
            row_mask = eos_mask if row_mask is None else row_mask + eos_mask
        token = choose_token(logits[0], row_mask, self.params, self.generator)
        logprob = torch.log_softmax(logits[0], dim=-1)[token].cpu()
        self.cum_logprob = self.cum_logprob + logprob
        self.tokens.append(token)
        self.token_logprobs.append(float(logprob))
        self.step += 1
        self.done = token in self._eos or self.step >= self.max_new_tokens
        zero = torch.zeros(1, dtype=torch.int64, device=self.device)
        return StepSelection(zero, torch.full((1,), token, dtype=torch.int64, device=self.device))

    def results(self, with_logprobs: bool = False) -> FinishedBeams:
        cum = float(self.cum_logprob)
        score = float(self.cum_logprob / (len(self.tokens) ** self.length_penalty))
        lps = [list(self.token_logprobs)] if with_logprobs else None
        paths = np.asarray([self.tokens], dtype=np.int64).reshape(1, len(self.tokens))
        return FinishedBeams([list(self.tokens)], lps, [score], [cum], paths)
