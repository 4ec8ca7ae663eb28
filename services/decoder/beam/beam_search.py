"""One request's beam search, step by step, with HuggingFace `generate(num_beams=k)` semantics.

This mirrors transformers' vectorised beam search exactly (same fp32 operations in the same
order) so that sequences, their order and `sequences_scores` match:

* running scores start at [0, -1e9, ...]: only the first (prompt) row contributes real
  candidates at step 0; the other rows are "ghosts" carried exactly as transformers carries them,
  but never returned;
* each step keeps the top `keep = max(2, 1 + n_eos) * k` candidates over all rows;
* candidates that hit EOS (or the length limit) among the first k become finished hypotheses,
  scored cum_logprob / generated_len ** length_penalty; the best k non-finished continue;
* the early-stopping heuristic and the stop rules for early_stopping True / False / "never".

The caller turns logits into (masked) log-probs and owns the KV and trie; this class only sees
log-prob rows and returns, per step, which parent row each new row extends and with what token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from widebeam.services.decoder.beam.beam_step import (
    NEG_INF_SCORE,
    BeamState,
    StepParams,
    beam_step,
)
from widebeam.services.decoder.beam.candidates import Candidates
from widebeam.services.decoder.beam.host_step import HostStep, stage_on_host

# Up to this many scores the candidate top-k runs over the flattened [k * vocab] matrix exactly
# as transformers does (same tie order on CPU); beyond it, a two-stage per-row top-k is used.
FLAT_TOPK_LIMIT = 1 << 22


class StepSelection(NamedTuple):
    parents: torch.Tensor  # [k] int64, row index (of the previous step) each new row extends
    tokens: torch.Tensor  # [k] int64, the token each new row appends


class FinishedBeam(NamedTuple):
    tokens: list[int]
    token_logprobs: list[float]
    score: float
    cum_logprob: float


@dataclass
class BeamSearch:
    num_beams: int
    num_return: int
    length_penalty: float
    early_stopping: bool | str
    eos_ids: torch.Tensor  # [n_eos] int64 (empty: no EOS)
    max_new_tokens: int
    device: torch.device
    step: int = 0
    # Host copies, queued every step without waiting (`results` reads only these, so a finished
    # request's output never waits for work queued after its last step).
    host_history: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    host_finished: tuple[torch.Tensor, torch.Tensor] | None = None  # ([4, k] int64, [3, k])

    def __post_init__(self) -> None:
        k = self.num_beams
        self.keep = max(2, 1 + int(self.eos_ids.numel())) * k
        dev = self.device
        running = torch.zeros((1, k), dtype=torch.float32, device=dev)
        running[:, 1:] = NEG_INF_SCORE
        ghost = torch.ones((1, k), dtype=torch.bool, device=dev)
        ghost[:, 0] = False

        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((1, k), dtype=dtype, device=dev)

        # Empty slots hold -inf, not transformers' -1e9: with a strongly negative length_penalty
        # a real hypothesis can score below -1e9 and must still beat an empty slot.
        self.state = BeamState(  # this request as a batch of one: [1, k] tensors
            running_scores=running,
            running_ghost=ghost,
            fin_scores=torch.full((1, k), float("-inf"), dtype=torch.float32, device=dev),
            fin_done=zeros(torch.bool),
            fin_ghost=zeros(torch.bool),
            fin_step=zeros(torch.int64),
            fin_parent=zeros(torch.int64),
            fin_token=zeros(torch.int64),
            fin_cum=zeros(torch.float32),
            fin_token_logprob=zeros(torch.float32),
            heuristic_open=torch.ones(1, dtype=torch.bool, device=dev),
        )
        # The stop decision stays on the device so a step needs no host round trip.
        self.done_flag = torch.zeros((), dtype=torch.bool, device=dev)  # [] bool
        self._done: bool | None = False

    @property
    def running_scores(self) -> torch.Tensor:  # [k] fp32
        return self.state.running_scores[0]

    def params(self) -> StepParams:
        return StepParams(
            self.num_beams,
            self.eos_ids,
            self.step,
            self.max_new_tokens,
            self.length_penalty,
            self.early_stopping,
        )

    def advance(self, logprobs: torch.Tensor) -> StepSelection:
        """logprobs: [k, vocab] fp32 (or [1, vocab] shared by all rows at step 0), already
        masked (-inf) by constraints and min_new_tokens. Returns the next rows."""
        k = self.num_beams
        if logprobs.shape[0] != k:
            logprobs = logprobs.expand(k, logprobs.shape[1])
        scores, flat = self._top_candidates(logprobs)  # [keep] fp32, [keep] int64
        vocab = logprobs.shape[1]
        rows, tokens = flat // vocab, flat % vocab
        return self.advance_candidates(Candidates(scores, rows, tokens, logprobs[rows, tokens]))

    def advance_candidates(self, cands: Candidates) -> StepSelection:
        """One step from the request's best `keep` candidates (`candidates.top_candidates`, or
        `advance`'s exhaustive ranking). Never waits for the device: `done` is read later."""
        scores, rows, tokens, logprobs = (c[None] for c in cands)
        result = beam_step(self.state, scores, rows, tokens, logprobs, self.params())
        selection = StepSelection(result.parents[0], result.tokens[0])
        (host,) = stage_on_host(result)
        self.adopt(result.state, selection, host)
        self.done_flag = result.done[0]
        return selection

    def adopt(self, state: BeamState, selection: StepSelection, host: HostStep) -> None:
        """Take the state of a step computed for this request (alone or in a cohort), with
        the step's host copies (`stage_on_host`)."""
        self.state = state
        self.step += 1
        self._done = None
        self.host_history.append(host.history)
        self.host_finished = host.finished

    @property
    def done(self) -> bool:
        if self._done is None:
            self._done = bool(self.done_flag)
        return self._done

    def resolve_done(self, value: bool) -> None:
        """Set `done` from a batched read of many requests' `done_flag`s (one sync per step)."""
        self._done = value

    def _top_candidates(self, logprobs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        accumulated = logprobs + self.running_scores[:, None]  # [k, vocab] fp32
        if accumulated.numel() <= FLAT_TOPK_LIMIT:
            return torch.topk(accumulated.reshape(-1), k=self.keep)
        # The request's top `keep` lies within the union of each row's top `keep`.
        vocab = accumulated.shape[1]
        per_row = min(self.keep, vocab)
        row_scores, row_tokens = torch.topk(accumulated, k=per_row, dim=1)
        flat_ids = (
            row_tokens + torch.arange(accumulated.shape[0], device=self.device)[:, None] * vocab
        )
        scores, pick = torch.topk(row_scores.reshape(-1), k=self.keep)
        return scores, flat_ids.reshape(-1)[pick]

    def results(self) -> list[FinishedBeam]:
        """The best `num_return` finished hypotheses, best first; ghosts and unfinished or
        impossible (-inf) slots are dropped, so fewer may be returned. Reads the host copies:
        call it once the step's copies have landed (the engine waits on the step's event)."""
        if self.host_finished is None:
            return []
        fin_ints, fin_floats = (t.tolist() for t in self.host_finished)
        fin_step, fin_parent, fin_token, valid = fin_ints
        fin_scores, fin_cum, fin_lp = fin_floats
        hist = [(ints.tolist(), lps.tolist()) for ints, lps in self.host_history]
        out: list[FinishedBeam] = []
        for slot in range(self.num_return):
            if not valid[slot]:
                continue
            tokens, lps = [fin_token[slot]], [fin_lp[slot]]
            row = fin_parent[slot]
            for step in range(fin_step[slot] - 1, -1, -1):
                (parents, step_tokens), step_lps = hist[step]
                tokens.append(step_tokens[row])
                lps.append(step_lps[row])
                row = parents[row]
            tokens.reverse()
            lps.reverse()
            out.append(FinishedBeam(tokens, lps, fin_scores[slot], fin_cum[slot]))
        return out
