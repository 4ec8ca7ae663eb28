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

from widebeam.services.decoder.beam.candidates import Candidates

NEG_INF_SCORE = -1.0e9
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
    host_finished: tuple[torch.Tensor, torch.Tensor] | None = None

    def __post_init__(self) -> None:
        k = self.num_beams
        self.keep = max(2, 1 + int(self.eos_ids.numel())) * k
        dev = self.device
        self.running_scores = torch.zeros(k, dtype=torch.float32, device=dev)  # [k] fp32
        self.running_scores[1:] = NEG_INF_SCORE
        self.running_ghost = torch.ones(k, dtype=torch.bool, device=dev)  # [k] bool
        self.running_ghost[0] = False
        # Empty slots hold -inf, not transformers' -1e9: with a strongly negative length_penalty
        # a real hypothesis can score below -1e9 and must still beat an empty slot.
        self.fin_scores = torch.full((k,), float("-inf"), dtype=torch.float32, device=dev)
        self.fin_done = torch.zeros(k, dtype=torch.bool, device=dev)  # [k] bool
        self.fin_ghost = torch.zeros(k, dtype=torch.bool, device=dev)  # [k] bool
        self.fin_step = torch.zeros(k, dtype=torch.int64, device=dev)  # [k] int64
        self.fin_parent = torch.zeros(k, dtype=torch.int64, device=dev)  # [k] int64
        self.fin_token = torch.zeros(k, dtype=torch.int64, device=dev)  # [k] int64
        self.fin_cum = torch.zeros(k, dtype=torch.float32, device=dev)  # [k] fp32
        self.fin_token_logprob = torch.zeros(k, dtype=torch.float32, device=dev)  # [k] fp32
        # Stop state stays on the device so a step needs no host round trip.
        self.heuristic_open = torch.ones((), dtype=torch.bool, device=dev)  # [] bool
        self.done_flag = torch.zeros((), dtype=torch.bool, device=dev)  # [] bool
        self._done: bool | None = False

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
        k = self.num_beams
        scores, cand_rows, cand_tokens, cand_logprobs = cands
        if self.step + 1 >= self.max_new_tokens:
            hits = torch.ones_like(cand_tokens, dtype=torch.bool)
        elif self.eos_ids.numel():
            hits = torch.isin(cand_tokens, self.eos_ids)
        else:
            hits = torch.zeros_like(cand_tokens, dtype=torch.bool)

        running_all = scores + hits.to(torch.float32) * NEG_INF_SCORE
        next_idx = torch.topk(running_all, k=k)[1]
        parents = cand_rows[next_idx]
        tokens = cand_tokens[next_idx]
        self._update_finished(scores, hits, cand_rows, cand_tokens, cand_logprobs)
        # A row that continues a hypothesis which already hit EOS (kept only to fill the beam)
        # is a placeholder too: nothing it finishes is returned.
        self.running_ghost = self.running_ghost[parents] | hits[next_idx]
        self.running_scores = running_all[next_idx]
        self.step += 1
        self._update_stop_state(hits)
        self._stage_on_host(parents, tokens, cand_logprobs[next_idx])
        return StepSelection(parents, tokens)

    def _stage_on_host(
        self,
        parents: torch.Tensor,  # [k] int64
        tokens: torch.Tensor,  # [k] int64
        logprobs: torch.Tensor,  # [k] fp32
    ) -> None:
        self.host_history.append(
            (_to_host(torch.stack((parents, tokens))), _to_host(logprobs))  # [2, k], [k]
        )
        returnable = self.fin_done & ~self.fin_ghost & torch.isfinite(self.fin_scores)
        ints = torch.stack(  # [4, k] int64
            (self.fin_step, self.fin_parent, self.fin_token, returnable.to(torch.int64))
        )
        floats = torch.stack((self.fin_scores, self.fin_cum, self.fin_token_logprob))  # [3, k]
        self.host_finished = (_to_host(ints), _to_host(floats))

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

    def _update_finished(
        self,
        scores: torch.Tensor,  # [keep] fp32 accumulated log-probs
        hits: torch.Tensor,  # [keep] bool
        cand_rows: torch.Tensor,  # [keep] int64
        cand_tokens: torch.Tensor,  # [keep] int64
        cand_logprobs: torch.Tensor,  # [keep] fp32
    ) -> None:
        k = self.num_beams
        just_finished = hits.clone()
        just_finished[k:] = False
        penalised = scores / ((self.step + 1) ** self.length_penalty)
        penalised = penalised + self._beams_full().to(torch.float32) * NEG_INF_SCORE
        penalised = penalised + (~self.heuristic_open).to(torch.float32) * NEG_INF_SCORE
        # transformers adds -1e9 to candidates that did not just finish; -inf keeps them out of
        # the finished set even when real scores fall below -1e9 (same ranking otherwise).
        penalised = torch.where(just_finished, penalised, float("-inf"))
        merged_scores = torch.cat((self.fin_scores, penalised))
        keep_idx = torch.topk(merged_scores, k=k)[1]
        step_col = torch.full_like(cand_rows, self.step)

        def merge(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
            return torch.cat((old, new))[keep_idx]

        self.fin_scores = merged_scores[keep_idx]
        self.fin_done = merge(self.fin_done, just_finished)
        self.fin_ghost = merge(self.fin_ghost, self.running_ghost[cand_rows])
        self.fin_step = merge(self.fin_step, step_col)
        self.fin_parent = merge(self.fin_parent, cand_rows)
        self.fin_token = merge(self.fin_token, cand_tokens)
        self.fin_cum = merge(self.fin_cum, scores)
        self.fin_token_logprob = merge(self.fin_token_logprob, cand_logprobs)

    def _beams_full(self) -> torch.Tensor:  # [] bool
        if self.early_stopping is True:
            return self.fin_done.all()
        return torch.zeros((), dtype=torch.bool, device=self.device)

    def _update_stop_state(self, hits: torch.Tensor) -> None:
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_len = self.max_new_tokens
        else:
            best_len = self.step
        best_running = self.running_scores[:1] / (best_len**self.length_penalty)
        # transformers compares with -1e9 for unfinished slots; -inf gives the same decision for
        # every real score above -1e9 and never stops a search whose scores fall below it.
        worst_finished = torch.where(self.fin_done, self.fin_scores.min(), float("-inf"))
        self.heuristic_open = self.heuristic_open & (best_running > worst_finished).any()
        going = self.heuristic_open & ~self._beams_full() & ~hits.all()
        # Only placeholder or impossible rows left: nothing real can finish any more.
        real = ~self.running_ghost & torch.isfinite(self.running_scores)
        self.done_flag = ~going | ~real.any()
        self._done = None

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


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """Queue a device-to-host copy into pinned memory (no wait); CPU tensors are returned as is
    (the search replaces, never mutates, its tensors)."""
    if not t.is_cuda:
        return t
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)
