"""Streamed beam requests advance in cohorts: lockstep requests as one batch.

Requests with the same width, step, search parameters and catalog (typically admitted together
under saturated traffic) form a cohort: their rows' candidates come from one LM-head pass, one
logits-stats launch and one per-row top-k, and transformers' beam step runs once over [B, k]
tensors — a step's host work does not grow with the number of requests. Wide requests (whose
blocks are ranked, `candidates.py`) and, without `batch`, every request form a cohort of one.
The expansion itself (`expansion.py`) runs through the policy's expander: eagerly, or replayed
from a CUDA graph.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch

from widebeam.services.decoder.beam.beam_search import BeamSearch, StepSelection
from widebeam.services.decoder.beam.expansion import CohortBatch, ExpansionSpec
from widebeam.services.decoder.beam.host_step import stage_on_host
from widebeam.services.decoder.beam.request_step import StepPolicy
from widebeam.services.decoder.beam.step_outputs import StepOutputs
from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.scheduler.request_state import RequestState

CohortKey = tuple[object, ...]
log = logging.getLogger(__name__)


class Advanced(NamedTuple):
    selections: dict[int, StepSelection]  # by chunk index
    failures: dict[int, Exception]  # requests whose step failed (nothing of theirs changed)


def advance_cohorts(
    chunks: list[tuple[RequestState, torch.Tensor]],  # requests with their rows' hidden states
    policy: StepPolicy,
    batch: bool = True,
) -> Advanced:
    """Advance every streamed beam request among `chunks`, slot tables and trie nodes included
    (the others are left to `StepPolicy.advance`)."""
    groups: dict[CohortKey, tuple[ExpansionSpec, list[int]]] = {}
    for i, (state, _) in enumerate(chunks):
        key = cohort_key(state, policy, batch)
        if key is not None:
            spec = key[0]
            assert isinstance(spec, ExpansionSpec)
            groups.setdefault(key, (spec, []))[1].append(i)
    done = Advanced({}, {})
    for spec, members in groups.values():
        try:
            _advance_members(chunks, members, spec, policy, done)
        except Exception:  # nothing was adopted yet: each request retries on its own
            if len(members) == 1:
                raise
            log.exception("a cohort of %d beam requests failed; advancing them alone", len(members))
            for i in members:
                try:
                    _advance_members(chunks, [i], spec, policy, done)
                except Exception as exc:
                    log.exception("request %s failed in its beam step", chunks[i][0].request_id)
                    done.failures[i] = exc
    return done


def _advance_members(
    chunks: list[tuple[RequestState, torch.Tensor]],
    members: list[int],
    spec: ExpansionSpec,
    policy: StepPolicy,
    done: Advanced,
) -> None:
    cohort = [chunks[i] for i in members]
    advanced = advance_cohort([s for s, _ in cohort], [h for _, h in cohort], spec, policy)
    done.selections.update(zip(members, advanced, strict=True))


def expansion_spec(state: RequestState, policy: StepPolicy) -> ExpansionSpec:
    search, constraint = _beam(state), state.constraint
    width = policy.vocab_size if constraint is None else max(constraint.max_fanout, 1)
    normalization = state.resolved.spec.normalization
    if normalization == Normalization.SID:
        assert constraint is not None  # validation: SID needs a constrained request
        constraint.sid_columns(state.resolved.eos_ids)  # built now, outside any graph capture
    return ExpansionSpec(
        num_beams=search.num_beams,
        keep=search.keep,
        rows_each=1 if search.step == 0 else search.num_beams,
        eos_ids=state.resolved.eos_ids,  # host tuple: no device read
        block_eos=search.step < state.resolved.spec.min_new_tokens,
        early_stopping=search.early_stopping,
        wide=search.num_beams * min(search.keep, width) > policy.one_pass_limit,
        constraint=constraint,
        normalization=normalization,
    )


def cohort_key(state: RequestState, policy: StepPolicy, batch: bool = True) -> CohortKey | None:
    """Requests with equal keys advance together (the key starts with their `ExpansionSpec`);
    None: not a streamed beam request."""
    search = state.search
    if not isinstance(search, BeamSearch) or not policy.streams(search.num_beams):
        return None
    spec = expansion_spec(state, policy)
    key = (spec, search.step, search.max_new_tokens, search.length_penalty)
    return (*key, id(state)) if spec.wide or not batch else key


def advance_cohort(
    states: list[RequestState],
    hiddens: list[torch.Tensor],  # each [S, hidden]: S = 1 at the first step, else k
    spec: ExpansionSpec,  # the cohort's (`expansion_spec` of any member)
    policy: StepPolicy,
) -> list[StepSelection]:
    searches = [_beam(s) for s in states]
    first = searches[0]
    constraint = states[0].constraint
    batch = CohortBatch(
        hiddens,
        BeamSearch.batched_state(searches),
        BeamSearch.shared_outputs(searches),
        None if constraint is None else [s.nodes for s in states],
        first.scalars(),
        first.eos_ids,
    )
    outputs = policy.expander.run(spec, batch)
    for b, (search, host) in enumerate(zip(searches, stage_on_host(outputs), strict=True)):
        search.adopt(outputs, b, host)
    _apply_cohort(states, outputs)
    return [StepSelection(outputs.parents[b], outputs.tokens[b]) for b in range(len(states))]


def _apply_cohort(states: list[RequestState], outputs: StepOutputs) -> None:
    """`request_step.apply_selection` for every member at once (same k, same step)."""
    k, step = states[0].num_rows, _beam(states[0]).step - 1
    parents = outputs.parents  # [B, k] int64
    tables = torch.stack([s.suffix_table for s in states])  # [B, k, step]
    new_slots = torch.stack([s.private_slots[step * k : (step + 1) * k] for s in states])
    gathered = tables.gather(1, parents[:, :, None].expand(-1, -1, tables.shape[2]))
    tables = torch.cat((gathered, new_slots[:, :, None]), dim=2)  # [B, k, step + 1]
    for b, state in enumerate(states):
        state.suffix_table = tables[b]
        state.pending_tokens = outputs.tokens[b]
        if state.constraint is not None:
            state.nodes = outputs.nodes[b]


def _beam(state: RequestState) -> BeamSearch:
    assert isinstance(state.search, BeamSearch)
    return state.search
