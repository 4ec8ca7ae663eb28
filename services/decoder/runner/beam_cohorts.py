"""Streamed beam requests advance in cohorts: requests of one expansion spec as one batch.

Requests with the same width, expansion parameters and catalog form a cohort, whatever step each
is at: their rows' candidates come from one LM-head pass, one logits-stats launch and one
per-row top-k, and transformers' beam step runs once over [B, k] tensors
(`search/beam_search.py`'s `expand_cohort`), each request with its own step scalars — a
step's host work and launches do not grow with the number of requests, and requests that
arrive a step apart (answers reach clients at different times) still share a launch. A first
step (one hidden row per request) and a later one (k rows) differ in spec, so arrivals form
their own cohort for that step. Wide requests (whose blocks are ranked,
`search/beam_candidates.py`) and, without `batch`, every request form a cohort of one; a
cohort of more than `MAX_COHORT` requests runs as several batches. The
expansion runs through the policy's expander: eagerly, or replayed from a CUDA graph
(`expansion_graphs.py`).
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch

from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.runner.expansion_graphs import MAX_COHORT
from widebeam.services.decoder.runner.request_state import RequestState, apply_selection
from widebeam.services.decoder.runner.request_step import StepPolicy
from widebeam.services.decoder.search.beam_expansion import ExpansionSpec
from widebeam.services.decoder.search.beam_search import BeamSearch, adopt_cohort, expand_cohort

CohortKey = tuple[object, ...]
log = logging.getLogger(__name__)


class Advanced(NamedTuple):
    advanced: set[int]  # chunk indices of the requests advanced here
    failures: dict[int, Exception]  # requests whose step failed (nothing of theirs changed)
    cohorts: int = 0  # cohort batches (streamed beam steps launched, retries aside)


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
    batches = [
        (spec, members[start : start + MAX_COHORT])
        for spec, members in groups.values()
        for start in range(0, len(members), MAX_COHORT)
    ]
    done = Advanced(set(), {})
    for spec, members in batches:
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
    return done._replace(cohorts=len(batches))


def _advance_members(
    chunks: list[tuple[RequestState, torch.Tensor]],
    members: list[int],
    spec: ExpansionSpec,
    policy: StepPolicy,
    done: Advanced,
) -> None:
    states = [chunks[i][0] for i in members]
    nodes = None if states[0].constraint is None else [s.nodes for s in states]
    searches = [s.beam_search for s in states]
    hiddens = [chunks[i][1] for i in members]
    outputs = expand_cohort(searches, hiddens, nodes, spec, policy.expander)
    # The expansion advanced the trie nodes already (-1 rows when unconstrained). Nothing of
    # the requests has changed before this line, so a failed cohort can retry request by request.
    apply_selection(states, outputs.parents, outputs.tokens, outputs.nodes)
    adopt_cohort(searches, outputs)
    done.advanced.update(members)


def expansion_spec(state: RequestState, policy: StepPolicy) -> ExpansionSpec:
    search, constraint = state.beam_search, state.constraint
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
        block_eos=state.eos_blocked,
        early_stopping=search.early_stopping,
        wide=search.num_beams * min(search.keep, width) > policy.one_pass_limit,
        constraint=constraint,
        normalization=normalization,
    )


def cohort_key(state: RequestState, policy: StepPolicy, batch: bool = True) -> CohortKey | None:
    """Requests with equal keys advance together (the key starts with their `ExpansionSpec`;
    step, length and length penalty are per-request scalars, so they are not in it); None: not
    a streamed beam request."""
    search = state.search
    if not isinstance(search, BeamSearch) or not policy.streams(search.num_beams):
        return None
    spec = expansion_spec(state, policy)
    return (spec, id(state)) if spec.wide or not batch else (spec,)
