"""Beam requests that move in lockstep advance as one batch.

Requests with the same width, step, search parameters and catalog (typically admitted together
under saturated traffic) form a cohort: their rows' candidates come from one LM-head pass, one
logits-stats launch and one per-row top-k, and transformers' beam step runs once over [B, k]
tensors (`beam_step.py`) instead of once per request — a step's host work no longer grows with
the number of requests. Only streamed requests whose candidates fit one pass join a cohort; the
rest advance alone (`request_step.py`).
"""

from __future__ import annotations

import logging

import torch

from widebeam.services.decoder.beam.beam_search import BeamSearch, StepSelection
from widebeam.services.decoder.beam.beam_step import beam_step
from widebeam.services.decoder.beam.candidates import ONE_PASS_LIMIT, RowLogprobs
from widebeam.services.decoder.beam.host_step import stage_on_host
from widebeam.services.decoder.beam.request_step import StepPolicy
from widebeam.services.decoder.scheduler.request_state import RequestState

CohortKey = tuple[object, ...]
log = logging.getLogger(__name__)


def advance_cohorts(
    chunks: list[tuple[RequestState, torch.Tensor]],  # requests with their rows' hidden states
    policy: StepPolicy,
) -> dict[int, StepSelection]:
    """Advance every cohort of two or more requests among `chunks`, slot tables and trie nodes
    included; returns their selections by chunk index (the others are left to advance alone)."""
    groups: dict[CohortKey, list[int]] = {}
    for i, (state, _) in enumerate(chunks):
        key = cohort_key(state, policy)
        if key is not None:
            groups.setdefault(key, []).append(i)
    selections: dict[int, StepSelection] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        cohort = [chunks[i] for i in members]
        try:
            advanced = advance_cohort([s for s, _ in cohort], [h for _, h in cohort], policy)
        except Exception:  # nothing was adopted yet: each request retries on its own
            log.exception("a cohort of %d beam requests failed; advancing them alone", len(cohort))
            continue
        selections.update(zip(members, advanced, strict=True))
    return selections


def cohort_key(state: RequestState, policy: StepPolicy) -> CohortKey | None:
    """Requests with equal keys can advance together; None: this one advances alone."""
    search, constraint = state.search, state.constraint
    if not isinstance(search, BeamSearch) or not policy.streams(search.num_beams):
        return None
    width = policy.vocab_size if constraint is None else max(constraint.max_fanout, 1)
    if search.num_beams * min(search.keep, width) > ONE_PASS_LIMIT:
        return None
    spec = state.resolved.spec
    return (
        search.num_beams,
        state.resolved.eos_ids,  # host tuple: no device read
        search.step,
        search.max_new_tokens,
        search.length_penalty,
        search.early_stopping,
        search.step < spec.min_new_tokens,
        id(constraint),
    )


def advance_cohort(
    states: list[RequestState],
    hiddens: list[torch.Tensor],  # each [S, hidden]: S = 1 at the first step, else k
    policy: StepPolicy,
) -> list[StepSelection]:
    searches = [_beam(s) for s in states]
    first = searches[0]
    count, k, keep, rows_each = len(states), first.num_beams, first.keep, hiddens[0].shape[0]
    device = hiddens[0].device
    allowed = None
    constraint = states[0].constraint
    if constraint is not None:
        nodes = torch.cat([s.nodes for s in states])
        allowed = constraint.allowed_tokens(nodes, first.eos_ids)
    block_eos = first.step < states[0].resolved.spec.min_new_tokens
    source = RowLogprobs(
        torch.cat(hiddens), policy.raw_logits, policy.vocab_size, first.eos_ids, block_eos, allowed
    )
    width = min(keep, source.width)
    top = source.top(torch.arange(count * rows_each, device=device), width)
    lps = top.logprobs.view(count, rows_each, width).expand(count, k, width)
    tokens = top.tokens.view(count, rows_each, width).expand(count, k, width)
    state = BeamSearch.batched_state(searches)
    scores = (lps + state.running_scores[:, :, None]).reshape(count, k * width)
    rows = torch.arange(k, device=device).repeat_interleave(width).expand(count, k * width)
    lps, tokens = lps.reshape(count, k * width), tokens.reshape(count, k * width)
    if k * width < keep:  # a trie narrower than keep / k: pad as impossible candidates
        pad = keep - k * width
        minus_inf = torch.full((count, pad), float("-inf"), device=device)
        zeros = torch.zeros((count, pad), dtype=torch.int64, device=device)
        scores, lps = torch.cat((scores, minus_inf), 1), torch.cat((lps, minus_inf), 1)
        rows, tokens = torch.cat((rows, zeros), 1), torch.cat((tokens, zeros), 1)
    best, pick = torch.topk(scores, keep, dim=1)
    result = beam_step(
        state, best, rows.gather(1, pick), tokens.gather(1, pick), lps.gather(1, pick),
        first.params(),
    )  # fmt: skip
    selections = []
    for b, (search, host) in enumerate(zip(searches, stage_on_host(result), strict=True)):
        selection = StepSelection(result.parents[b], result.tokens[b])
        search.adopt(result.state, b, selection, host)
        search.done_flag = result.done[b]
        selections.append(selection)
    _apply_cohort(states, result.parents, result.tokens)
    return selections


def _apply_cohort(
    states: list[RequestState],
    parents: torch.Tensor,  # [B, k] int64
    tokens: torch.Tensor,  # [B, k] int64
) -> None:
    """`request_step.apply_selection` for every member at once (same k, same step)."""
    k, step = states[0].num_rows, _beam(states[0]).step - 1
    tables = torch.stack([s.suffix_table for s in states])  # [B, k, step]
    new_slots = torch.stack([s.private_slots[step * k : (step + 1) * k] for s in states])
    gathered = tables.gather(1, parents[:, :, None].expand(-1, -1, tables.shape[2]))
    tables = torch.cat((gathered, new_slots[:, :, None]), dim=2)  # [B, k, step + 1]
    constraint = states[0].constraint
    nodes = None
    if constraint is not None:
        # At step 0 every row still sits on the prompt's single start node.
        nodes = torch.stack([s.nodes.expand(k) for s in states]).gather(1, parents)
        nodes = constraint.advance(nodes.reshape(-1), tokens.reshape(-1)).view(len(states), k)
    for b, state in enumerate(states):
        state.suffix_table = tables[b]
        state.pending_tokens = tokens[b]
        if nodes is not None:
            state.nodes = nodes[b]


def _beam(state: RequestState) -> BeamSearch:
    assert isinstance(state.search, BeamSearch)
    return state.search
