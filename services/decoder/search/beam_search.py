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
Streamed requests that move in lockstep take the same step together (`expand_cohort`: hidden
states in, the cohort's packed [B, k] outputs out).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch

from widebeam.services.decoder.requests.results import FinishedBeams
from widebeam.services.decoder.search.beam_candidates import Candidates
from widebeam.services.decoder.search.beam_expansion import CohortBatch, Expander, ExpansionSpec
from widebeam.services.decoder.search.beam_host_step import HostStep, stage_on_host
from widebeam.services.decoder.search.beam_step import (
    BeamState,
    ScalarRow,
    StepParams,
    beam_step,
    scalars_on,
    step_scalars,
)
from widebeam.services.decoder.search.beam_step_outputs import FloatRow, IntRow, StepOutputs
from widebeam.services.decoder.search.step_selection import StepSelection

# Every request of a shape (length, length penalty, early stopping) has the same scalars at a
# step: computed once, not per request and step (a few shapes x their steps in all).
_step_scalars = functools.lru_cache(maxsize=4096, typed=True)(step_scalars)

# Up to this many scores the candidate top-k runs over the flattened [k * vocab] matrix exactly
# as transformers does (same tie order on CPU); beyond it, a two-stage per-row top-k is used.
FLAT_TOPK_LIMIT = 1 << 22


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
    # Host copies of every step, queued without waiting (`results` reads only these, so a
    # finished request's output never waits for work queued after its last step); the last
    # one holds the finished slots.
    host_steps: list[HostStep] = field(default_factory=list)

    def __post_init__(self) -> None:
        k = self.num_beams
        self.keep = max(2, 1 + int(self.eos_ids.numel())) * k
        # This request's search state is row `_row` of a batch's step outputs (its own [1, k]
        # ones, or its cohort's [B, k] ones, shared without copies); None until the first
        # step: a cohort of fresh requests builds their initial states in one go.
        self._outputs: StepOutputs | None = None
        self._initial: BeamState | None = None
        self._row = 0
        # The stop decision stays on the device so a step needs no host round trip.
        self.done_flag = torch.zeros((), dtype=torch.bool, device=self.device)  # [] bool
        self._done: bool | None = False

    @property
    def state(self) -> BeamState:  # [1, k] tensors
        if self._outputs is None:
            if self._initial is None:
                self._initial = BeamState.initial(1, self.num_beams, self.device)
            return self._initial
        batch = self._outputs.state
        return batch if batch.batch_size == 1 else batch.row(self._row)

    @staticmethod
    def shared_outputs(searches: list[BeamSearch]) -> StepOutputs | None:
        """The previous step's outputs when `searches` are exactly its batch, in order."""
        outputs = searches[0]._outputs
        if (
            outputs is None
            or outputs.batch_size != len(searches)
            or any(s._outputs is not outputs or s._row != b for b, s in enumerate(searches))
        ):
            return None
        return outputs

    @staticmethod
    def batched_state(searches: list[BeamSearch]) -> BeamState:
        """The [B, k] state of `searches` in order: built fresh, reused when they are exactly
        the previous step's batch, else stacked."""
        first = searches[0]
        if all(s._outputs is None for s in searches):
            return BeamState.initial(len(searches), first.num_beams, first.device)
        shared = BeamSearch.shared_outputs(searches)
        if shared is not None:
            return shared.state
        return BeamState.stack([s.state for s in searches])

    @staticmethod
    def batched_outputs(searches: list[BeamSearch]) -> StepOutputs | None:
        """Step outputs whose state rows are the [B, k] state of `searches` in order: the
        previous step's own when they are exactly its batch, fresh ones when none has
        stepped, else their rows gathered (`StepOutputs.gather`); None when some have
        stepped and some not."""
        shared = BeamSearch.shared_outputs(searches)
        if shared is not None:
            return shared
        sources = [(s._outputs, s._row) for s in searches]
        if all(outputs is None for outputs, _ in sources):
            first = searches[0]
            return StepOutputs.initial(len(searches), first.num_beams, first.device)
        if any(outputs is None for outputs, _ in sources):
            return None
        return StepOutputs.gather(sources)  # type: ignore[arg-type]

    @property
    def running_scores(self) -> torch.Tensor:  # [k] fp32
        return self.state.running_scores[0]

    def params(self) -> StepParams:
        return StepParams(
            self.num_beams,
            self.eos_ids,
            self.early_stopping,
        )

    def scalars(self) -> ScalarRow:
        """This step's `beam_step` scalars (host values, shared with every request at the same
        step of the same shape)."""
        return _step_scalars(
            self.step, self.max_new_tokens, self.length_penalty, self.early_stopping
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
        """One step from the request's best `keep` candidates (`beam_candidates.top_candidates`, or
        `advance`'s exhaustive ranking). Never waits for the device: `done` is read later."""
        scores, rows, tokens, logprobs = (c[None] for c in cands)
        result = beam_step(
            self.state,
            scores,
            rows,
            tokens,
            logprobs,
            self.params(),
            scalars_on([self.scalars()], self.device),
        )
        outputs = StepOutputs.pack(result, None)
        (host,) = stage_on_host(outputs)
        self.adopt(outputs, 0, host)
        return StepSelection(outputs.parents[0], outputs.tokens[0])

    def adopt(
        self,
        outputs: StepOutputs,
        row: int,
        host: HostStep,
        done_flag: torch.Tensor | None = None,  # [] bool outputs.done[row], when at hand
    ) -> None:
        """Take the outputs of a step computed for this request (alone: row 0 of a [1, k]
        batch; in a cohort: its row of the cohort's [B, k] outputs), with the step's host
        copies (`stage_on_host`)."""
        self._outputs, self._row = outputs, row
        self.done_flag = outputs.done[row] if done_flag is None else done_flag
        self.step += 1
        self._done = None
        self.host_steps.append(host)

    @property
    def done(self) -> bool:
        if self._done is None:
            self._done = bool(self.done_flag)
        return self._done

    def resolve_done(self, value: bool, at_step: int) -> None:
        """Set `done` from a batched read of many requests' `done_flag`s (one sync per step),
        the decision of the step that left the search at `at_step` steps. A search stepped
        further before that read (the engine decodes a new request before its first flag is
        read) is rewound when it turns out done there: the later steps' host copies go, so
        its results are exactly those of the step that finished it."""
        self._done = value
        if value and self.step > at_step:
            del self.host_steps[at_step:]
            self.step = at_step

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

    def results(self, with_logprobs: bool = False) -> FinishedBeams:
        """The best `num_return` finished hypotheses, best first; ghosts and unfinished or
        impossible (-inf) slots are dropped, so fewer may be returned. Reads the host copies:
        call it once the step's copies have landed (the engine waits on the step's event).
        All hypotheses are traced back through the step history at once (numpy)."""
        if not self.host_steps:
            return FinishedBeams.empty()
        fin_ints, fin_floats = (t.numpy()[:, : self.num_return] for t in self.host_steps[-1])
        slots = fin_ints[IntRow.RETURNABLE].nonzero()[0]  # [m]
        if not slots.size:
            return FinishedBeams.empty()
        last = fin_ints[IntRow.FIN_STEP][slots]  # [m] index of each hypothesis' final token
        scores = fin_floats[FloatRow.FIN_SCORES][slots].tolist()
        cums = fin_floats[FloatRow.FIN_CUM][slots].tolist()
        length = int(last.max()) + 1
        if int(last.min()) + 1 < length:
            tokens, lps = self._traced_ragged(fin_ints, fin_floats, slots, last, with_logprobs)
            token_lps = _ragged_rows(lps, last) if lps is not None else None
            inside = np.arange(length)[None, :] <= last[:, None]  # [m, L]
            paths = np.where(inside, tokens, -1)
            return FinishedBeams(_ragged_rows(tokens, last), token_lps, scores, cums, paths)
        tokens, lps = self._traced_full(fin_ints, fin_floats, slots, length, with_logprobs)
        token_lps = lps.tolist() if lps is not None else None
        return FinishedBeams(tokens.tolist(), token_lps, scores, cums, tokens)

    def _traced_full(
        self,
        fin_ints: np.ndarray,  # [len(IntRow), num_return] int64, the last step's
        fin_floats: np.ndarray,  # [len(FloatRow), num_return] fp32
        slots: np.ndarray,  # [m] int64 the returned finished slots
        length: int,  # every returned hypothesis' token count
        with_logprobs: bool,
    ) -> tuple[np.ndarray, np.ndarray | None]:  # [m, length] int64 tokens, fp32 log-probs
        """Hypotheses that all end at the last step (as every Recommend answer's do): traced
        back a column at a time, with no per-step test of which are still inside."""
        token_columns = [fin_ints[IntRow.FIN_TOKEN][slots]]
        lp_columns = [fin_floats[FloatRow.FIN_TOKEN_LOGPROB][slots]] if with_logprobs else []
        row = fin_ints[IntRow.FIN_PARENT][slots]  # the row each extends at the step before
        for step in range(length - 2, -1, -1):
            ints, floats = self.host_steps[step]
            ints = ints.numpy()
            token_columns.append(ints[IntRow.TOKENS][row])
            if with_logprobs:
                lp_columns.append(floats.numpy()[FloatRow.LOGPROBS][row])
            row = ints[IntRow.PARENTS][row]
        tokens = np.array(token_columns[::-1]).T  # [m, length]
        return tokens, np.array(lp_columns[::-1]).T if with_logprobs else None

    def _traced_ragged(
        self,
        fin_ints: np.ndarray,  # [len(IntRow), num_return] int64, the last step's
        fin_floats: np.ndarray,  # [len(FloatRow), num_return] fp32
        slots: np.ndarray,  # [m] int64 the returned finished slots
        last: np.ndarray,  # [m] int64 index of each hypothesis' final token
        with_logprobs: bool,
    ) -> tuple[np.ndarray, np.ndarray | None]:  # [m, L] int64 tokens, fp32 log-probs (0 after)
        """Hypotheses of different lengths: each step fills in those still inside at it."""
        length = int(last.max()) + 1
        tokens = np.zeros((slots.size, length), dtype=np.int64)
        lps = np.zeros((slots.size, length), dtype=np.float32) if with_logprobs else None
        every = np.arange(slots.size)
        tokens[every, last] = fin_ints[IntRow.FIN_TOKEN, slots]
        if lps is not None:
            lps[every, last] = fin_floats[FloatRow.FIN_TOKEN_LOGPROB, slots]
        row = fin_ints[IntRow.FIN_PARENT, slots].copy()  # the row each extends at its step - 1
        for step in range(length - 2, -1, -1):
            live = np.flatnonzero(last > step)
            ints, floats = (t.numpy() for t in self.host_steps[step])
            at = row[live]
            tokens[live, step] = ints[IntRow.TOKENS, at]
            if lps is not None:
                lps[live, step] = floats[FloatRow.LOGPROBS, at]
            row[live] = ints[IntRow.PARENTS, at]
        return tokens, lps


def expand_cohort(
    searches: list[BeamSearch],  # B lockstep searches: same width and expansion spec
    hiddens: list[torch.Tensor],  # each [rows_each, hidden] model dtype (1 row at the first step)
    nodes: list[torch.Tensor] | None,  # each [rows_each] int64 trie nodes (constrained only)
    spec: ExpansionSpec,  # the cohort's
    expander: Expander,
) -> StepOutputs:  # [B, ·, k]: row b is searches[b]'s step
    """One streamed step of every search at once (one LM-head pass, one ranking, one
    transformers beam step over [B, k], each search with its own step scalars); the searches
    are unchanged until they `adopt_cohort` it. Never waits for the device."""
    outputs = BeamSearch.batched_outputs(searches)
    state = BeamSearch.batched_state(searches) if outputs is None else outputs.state
    scalars = [s.scalars() for s in searches]
    batch = CohortBatch(hiddens, state, outputs, nodes, scalars, searches[0].eos_ids)
    return expander.run(spec, batch)


def adopt_cohort(searches: list[BeamSearch], outputs: StepOutputs) -> None:
    """Each search takes its row of `expand_cohort`'s outputs (host copies queued first)."""
    hosts, done_flags = stage_on_host(outputs), outputs.done.unbind(0)
    for b, (search, host, done) in enumerate(zip(searches, hosts, done_flags, strict=True)):
        search.adopt(outputs, b, host, done)


def _ragged_rows(values: np.ndarray, last: np.ndarray) -> list[list]:
    """[m, L] -> m lists, row i cut after index last[i] (no copy per row when all are full)."""
    rows = values.tolist()
    if int(last.min()) == values.shape[1] - 1:
        return rows
    return [r[: end + 1] for r, end in zip(rows, last.tolist(), strict=True)]
