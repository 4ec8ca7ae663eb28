"""A streamed beam step for B lockstep requests: hidden states in, packed step outputs out.

LM head, trie mask, candidate ranking, transformers' beam step and the trie advance run at
shapes fixed by an `ExpansionSpec` and the batch size, without a single read from the device:
the same function runs eagerly (the CPU reference path) and inside a captured CUDA graph
(`runner/expansion_graphs.py`). What differs between requests and steps (the step number, the
last step, the length penalty's divisors) comes in as a tensor, one row per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.search.beam_candidates import (
    RowLogprobs,
    row_candidates,
    top_candidates,
)
from widebeam.services.decoder.search.beam_step import (
    BeamState,
    ScalarRow,
    StepParams,
    beam_step,
    scalars_on,
)
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

# (hidden [n, hidden], columns [C] int64 sorted, optional) -> [n, vocab] or [n, C] model dtype
Head = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class ExpansionSpec:
    """Everything a step's work depends on besides its tensors (a captured step's key, with
    the batch bucket). A trie is keyed by identity."""

    num_beams: int
    keep: int
    rows_each: int  # hidden rows per request: 1 at the first step (rows share the prompt)
    eos_ids: tuple[int, ...]
    block_eos: bool  # min_new_tokens not reached
    early_stopping: bool | str
    wide: bool  # ranks blocks (one request), not each row's top `keep`
    constraint: TrieConstraint | None
    normalization: Normalization = Normalization.VOCAB  # SID: the constraint's `sid_columns`


class CohortBatch(NamedTuple):
    """One expansion's inputs as the engine holds them (an expander packs them)."""

    hiddens: list[torch.Tensor]  # each request's [rows_each, hidden] model dtype
    state: BeamState  # [B, k]
    shared: StepOutputs | None  # the previous step's outputs when `state` is exactly theirs
    nodes: list[torch.Tensor] | None  # each request's [rows_each] int64 trie nodes
    scalars: list[ScalarRow]  # each request's `step_scalars`
    eos_ids: torch.Tensor  # [n_eos] int64


class ExpansionInputs(NamedTuple):
    hidden: torch.Tensor  # [B * rows_each, hidden] model dtype
    state: BeamState  # [B, k]
    nodes: torch.Tensor | None  # [B * rows_each] int64 trie nodes (constrained only)
    scalars: torch.Tensor  # [B, len(Scalar)] fp32 each request's `step_scalars`
    eos_ids: torch.Tensor  # [n_eos] int64 (the spec's, on the device)


def expand(
    spec: ExpansionSpec,
    inputs: ExpansionInputs,
    lm_head: Head,
    vocab_size: int,
) -> StepOutputs:
    state, eos_ids = inputs.state, inputs.eos_ids
    batch, k, rows_each = state.batch_size, spec.num_beams, spec.rows_each
    constraint = spec.constraint
    allowed, columns = None, None
    if constraint is not None:
        assert inputs.nodes is not None
        allowed = constraint.allowed_tokens(inputs.nodes, eos_ids)
        if spec.normalization == Normalization.SID:
            columns = constraint.sid_columns(spec.eos_ids)  # cached: no copy inside a capture
    source = RowLogprobs(
        inputs.hidden, lm_head, vocab_size, eos_ids, spec.block_eos, allowed, columns=columns
    )
    if spec.wide:
        if batch != 1:
            raise ValueError("a wide beam step expands one request at a time")
        c = top_candidates(source, state.running_scores[0], spec.keep, one_pass_limit=0)
        scores, rows, tokens, lps = (t[None] for t in c)
    else:
        scores, rows, tokens, lps = row_candidates(source, state.running_scores, spec.keep)
    params = StepParams(k, eos_ids, spec.early_stopping)
    result = beam_step(state, scores, rows, tokens, lps, params, inputs.scalars)
    nodes = None
    if constraint is not None:
        assert inputs.nodes is not None
        rows = inputs.nodes.view(batch, rows_each)
        nodes = constraint.advance_rows(rows, result.parents, result.tokens)
    return StepOutputs.pack(result, nodes)


class Expander:
    """Runs `expand` for a cohort; `runner/expansion_graphs.py` replays it from CUDA graphs."""

    def __init__(self, lm_head: Head, vocab_size: int) -> None:
        self.lm_head = lm_head
        self.vocab_size = vocab_size

    def run(self, spec: ExpansionSpec, batch: CohortBatch) -> StepOutputs:
        scalars = scalars_on(batch.scalars, batch.hiddens[0].device)
        nodes = None if batch.nodes is None else torch.cat(batch.nodes)
        inputs = ExpansionInputs(
            torch.cat(batch.hiddens), batch.state, nodes, scalars, batch.eos_ids
        )
        return expand(spec, inputs, self.lm_head, self.vocab_size)
