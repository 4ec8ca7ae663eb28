"""transformers' beam step, vectorised over B requests that move in lockstep.

One request is B = 1 (`BeamSearch.advance_candidates`); a cohort of requests with the same
width and expansion parameters (`runner/beam_cohorts.py`) runs the same operations once over
[B, k] tensors instead of once per request. What differs between a cohort's requests (their
step, length and length penalty) comes in as one row of scalars per request. Every operation
is transformers' (see `beam_search.py` for the semantics); nothing here reads from the device.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from operator import attrgetter
from typing import NamedTuple

import torch

from widebeam.services.decoder.host_copies import to_device_async

NEG_INF_SCORE = -1.0e9


@dataclass
class BeamState:
    """Search state of B requests × k rows."""

    running_scores: torch.Tensor  # [B, k] fp32
    running_ghost: torch.Tensor  # [B, k] bool, placeholder rows (never returned)
    fin_scores: torch.Tensor  # [B, k] fp32 finished hypotheses (-inf: empty slot)
    fin_done: torch.Tensor  # [B, k] bool
    fin_ghost: torch.Tensor  # [B, k] bool
    fin_step: torch.Tensor  # [B, k] int64
    fin_parent: torch.Tensor  # [B, k] int64
    fin_token: torch.Tensor  # [B, k] int64
    fin_cum: torch.Tensor  # [B, k] fp32
    fin_token_logprob: torch.Tensor  # [B, k] fp32
    heuristic_open: torch.Tensor  # [B] bool

    @classmethod
    def initial(cls, batch: int, k: int, device: torch.device) -> BeamState:
        """B fresh requests: only row 0 is real (running 0), rows 1.. are transformers' ghosts
        (running -1e9); no finished hypotheses yet."""
        running = torch.full((batch, k), NEG_INF_SCORE, dtype=torch.float32, device=device)
        running[:, 0] = 0.0
        ghost = torch.ones((batch, k), dtype=torch.bool, device=device)
        ghost[:, 0] = False

        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros((batch, k), dtype=dtype, device=device)

        # Empty slots hold -inf, not transformers' -1e9: with a strongly negative length_penalty
        # a real hypothesis can score below -1e9 and must still beat an empty slot.
        return cls(
            running_scores=running,
            running_ghost=ghost,
            fin_scores=torch.full((batch, k), float("-inf"), dtype=torch.float32, device=device),
            fin_done=zeros(torch.bool),
            fin_ghost=zeros(torch.bool),
            fin_step=zeros(torch.int64),
            fin_parent=zeros(torch.int64),
            fin_token=zeros(torch.int64),
            fin_cum=zeros(torch.float32),
            fin_token_logprob=zeros(torch.float32),
            heuristic_open=torch.ones(batch, dtype=torch.bool, device=device),
        )

    @property
    def batch_size(self) -> int:
        return self.running_scores.shape[0]

    @classmethod
    def stack(cls, states: list[BeamState]) -> BeamState:
        return cls(*(torch.cat(column) for column in zip(*map(state_tensors, states), strict=True)))

    def row(self, b: int) -> BeamState:
        """Request b of the batch as a B = 1 state (views)."""
        rows = slice(b, b + 1)
        return BeamState(*(tensor[rows] for tensor in state_tensors(self)))


# Field names in declaration order: a step's state is taken apart per request and per cohort,
# where `dataclasses.fields` would cost more than the tensor views themselves.
STATE_FIELDS = tuple(f.name for f in fields(BeamState))
_get_state_tensors = attrgetter(*STATE_FIELDS)


def state_tensors(state: BeamState) -> tuple[torch.Tensor, ...]:
    """`state`'s tensors in field order (the tensors themselves, no copies)."""
    return _get_state_tensors(state)


@dataclass(frozen=True)
class StepParams:
    """What every request of a lockstep batch shares and a captured step bakes in; what differs
    between requests or steps is passed as `step_scalars` rows instead."""

    num_beams: int
    eos_ids: torch.Tensor  # [n_eos] int64
    early_stopping: bool | str


class Scalar(IntEnum):
    """Columns of a step's scalars (`step_scalars`, one row per request), read by `beam_step`
    on the device."""

    STEP = 0  # the step's index (a finished slot's last token)
    FINISHED_DIVISOR = 1  # (step + 1) ** length_penalty: a candidate that finishes now
    RUNNING_DIVISOR = 2  # best_len ** length_penalty: the early-stopping heuristic's best row
    LAST_STEP = 3  # 1.0 at the last step (every candidate finishes), else 0.0


# A request's scalars at one step (a tuple: rows are cached and shared between requests).
ScalarRow = tuple[float, float, float, float]


def scalars_on(
    rows: list[ScalarRow],  # one `step_scalars` per request
    device: torch.device,
) -> torch.Tensor:  # [B, len(Scalar)] fp32
    """Requests' `step_scalars` as the tensor `beam_step` takes (a queued copy on CUDA)."""
    return to_device_async(torch.tensor(rows, dtype=torch.float32), device)


def step_scalars(
    step: int, max_new_tokens: int, length_penalty: float, early_stopping: bool | str
) -> ScalarRow:
    """One request's row of `beam_step`'s `scalars`, in `Scalar` order."""
    never = early_stopping == "never" and length_penalty > 0.0
    best_len = max_new_tokens if never else step + 1
    # Written out in `Scalar` order (STEP, FINISHED_DIVISOR, RUNNING_DIVISOR, LAST_STEP): it
    # runs per request and step, where walking the enum costs more than the arithmetic.
    return (
        float(step),
        float((step + 1) ** length_penalty),
        float(best_len**length_penalty),
        float(step + 1 >= max_new_tokens),
    )


class StepResult(NamedTuple):
    state: BeamState
    parents: torch.Tensor  # [B, k] int64
    tokens: torch.Tensor  # [B, k] int64
    logprobs: torch.Tensor  # [B, k] fp32 the chosen tokens' own log-probs
    done: torch.Tensor  # [B] bool


def beam_step(
    state: BeamState,
    scores: torch.Tensor,  # [B, keep] fp32 accumulated candidate scores, best first
    cand_rows: torch.Tensor,  # [B, keep] int64
    cand_tokens: torch.Tensor,  # [B, keep] int64
    cand_logprobs: torch.Tensor,  # [B, keep] fp32
    p: StepParams,
    scalars: torch.Tensor,  # [B, len(Scalar)] fp32 `step_scalars` rows, on the device
) -> StepResult:
    k = p.num_beams
    last_step = scalars[:, Scalar.LAST_STEP, None] > 0  # [B, 1] bool
    if p.eos_ids.numel():
        hits = torch.isin(cand_tokens, p.eos_ids) | last_step
    else:
        hits = torch.zeros_like(cand_tokens, dtype=torch.bool) | last_step
    running_all = scores + hits.to(torch.float32) * NEG_INF_SCORE
    next_idx = torch.topk(running_all, k=k, dim=1)[1]  # [B, k]
    parents = cand_rows.gather(1, next_idx)
    tokens = cand_tokens.gather(1, next_idx)
    new = _update_finished(
        state, scores, hits, cand_rows, cand_tokens, cand_logprobs, p, scalars
    )  # fmt: skip
    # A row that continues a hypothesis which already hit EOS (kept only to fill the beam)
    # is a placeholder too: nothing it finishes is returned.
    new.running_ghost = state.running_ghost.gather(1, parents) | hits.gather(1, next_idx)
    new.running_scores = running_all.gather(1, next_idx)
    done = _stop_state(new, hits, p, scalars)
    return StepResult(new, parents, tokens, cand_logprobs.gather(1, next_idx), done)


def _beams_full(fin_done: torch.Tensor, p: StepParams) -> torch.Tensor:  # [B] bool
    if p.early_stopping is True:
        return fin_done.all(dim=1)
    return torch.zeros(fin_done.shape[0], dtype=torch.bool, device=fin_done.device)


def _update_finished(
    state: BeamState,
    scores: torch.Tensor,  # [B, keep] fp32
    hits: torch.Tensor,  # [B, keep] bool
    cand_rows: torch.Tensor,  # [B, keep] int64
    cand_tokens: torch.Tensor,  # [B, keep] int64
    cand_logprobs: torch.Tensor,  # [B, keep] fp32
    p: StepParams,
    scalars: torch.Tensor,  # [B, len(Scalar)] fp32
) -> BeamState:
    k = p.num_beams
    just_finished = hits.clone()
    just_finished[:, k:] = False
    penalised = scores / scalars[:, Scalar.FINISHED_DIVISOR, None]
    step = scalars[:, Scalar.STEP, None].to(torch.int64)  # [B, 1]
    full = _beams_full(state.fin_done, p).to(torch.float32)[:, None]  # [B, 1]
    penalised = penalised + full * NEG_INF_SCORE
    closed = (~state.heuristic_open).to(torch.float32)[:, None]  # [B, 1]
    penalised = penalised + closed * NEG_INF_SCORE
    # transformers adds -1e9 to candidates that did not just finish; -inf keeps them out of
    # the finished set even when real scores fall below -1e9 (same ranking otherwise).
    penalised = torch.where(just_finished, penalised, float("-inf"))
    merged_scores = torch.cat((state.fin_scores, penalised), dim=1)
    keep_idx = torch.topk(merged_scores, k=k, dim=1)[1]  # [B, k]

    def merge(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return torch.cat((old, new), dim=1).gather(1, keep_idx)

    return BeamState(
        running_scores=state.running_scores,
        running_ghost=state.running_ghost,
        fin_scores=merged_scores.gather(1, keep_idx),
        fin_done=merge(state.fin_done, just_finished),
        fin_ghost=merge(state.fin_ghost, state.running_ghost.gather(1, cand_rows)),
        fin_step=merge(state.fin_step, step.expand_as(cand_rows)),
        fin_parent=merge(state.fin_parent, cand_rows),
        fin_token=merge(state.fin_token, cand_tokens),
        fin_cum=merge(state.fin_cum, scores),
        fin_token_logprob=merge(state.fin_token_logprob, cand_logprobs),
        heuristic_open=state.heuristic_open,
    )


def _stop_state(
    state: BeamState, hits: torch.Tensor, p: StepParams, scalars: torch.Tensor
) -> torch.Tensor:  # [B] bool
    """Update the early-stopping heuristic in `state`; return which requests are done."""
    best_divisor = scalars[:, Scalar.RUNNING_DIVISOR, None]  # [B, 1]
    best_running = state.running_scores[:, :1] / best_divisor  # [B, 1]
    # transformers compares with -1e9 for unfinished slots; -inf gives the same decision for
    # every real score above -1e9 and never stops a search whose scores fall below it.
    worst = state.fin_scores.min(dim=1, keepdim=True).values
    worst_finished = torch.where(state.fin_done, worst, float("-inf"))  # [B, k]
    state.heuristic_open = state.heuristic_open & (best_running > worst_finished).any(dim=1)
    going = state.heuristic_open & ~_beams_full(state.fin_done, p) & ~hits.all(dim=1)
    # Only placeholder or impossible rows left: nothing real can finish any more.
    real = ~state.running_ghost & torch.isfinite(state.running_scores)
    return ~going | ~real.any(dim=1)
