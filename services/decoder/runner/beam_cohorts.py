"""Streamed beam requests advance in cohorts: requests of one expansion spec as one batch.

Requests with the same width, expansion parameters and catalog form a cohort, whatever step each
is at: their rows' candidates come from one LM-head pass, one logits-stats launch and one
per-row top-k, and transformers' beam step runs once over [B, k] tensors
(`search/beam_search.py`'s `expand_cohort`), each request with its own step scalars — a
step's host work and launches do not grow with the number of requests, and requests that
arrive a step apart (answers reach clients at different times) still share a launch. A first
step (one hidden row per request) and a later one (k rows) differ in spec, so arrivals form
their own cohort for that step. A request's specs are built once and kept on its state
(`CohortSpecs`), not rebuilt per request and step. Wide requests (whose blocks are ranked,
`search/beam_candidates.py`) and, without `batch`, every request form a cohort of one; a
cohort of more than `MAX_COHORT` requests runs as several batches. The
expansion runs through the policy's expander: eagerly, or replayed from a CUDA graph
(`expansion_graphs.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.runner.expansion_graphs import MAX_COHORT
from widebeam.services.decoder.runner.request_state import RequestState, apply_selection
from widebeam.services.decoder.runner.request_step import StepPolicy
from widebeam.services.decoder.search.beam_expansion import ExpansionSpec
from widebeam.services.decoder.search.beam_search import BeamSearch, adopt_cohort, expand_cohort

# A cohort's spec, or (spec, id of its one request) for a request that advances alone.
CohortKey = ExpansionSpec | tuple[ExpansionSpec, int]
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
    groups: dict[CohortKey, tuple[ExpansionSpec, list[int], CohortSpecs | None]] = {}
    for i, (state, _) in enumerate(chunks):
        spec = expansion_spec(state, policy)
        if spec is None:
            continue
        key = _key(spec, state, batch)
        group = groups.get(key)
        if group is None:
            groups[key] = (spec, [i], state.cohort_specs)
        else:
            group[1].append(i)
            # Equal specs now, equal specs at every step (`CohortSpecs`): a cohort's requests
            # share its first one's, so each of their later specs is built once for them all.
            state.cohort_specs = group[2]
    batches = [
        (spec, members[start : start + MAX_COHORT])
        for spec, members, _ in groups.values()
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


@dataclass(frozen=True, eq=False, slots=True)  # compared by identity
class CohortSpecs:
    """A request's expansion specs, kept on its state (`RequestState.cohort_specs`) so that a
    step picks its spec instead of building one per request and step: all that varies a
    request's spec from step to step is whether it is its first (one hidden row per request)
    and whether min_new_tokens still blocks EOS, so each of those four is built once, at the
    first step that needs it (`_built_spec`); the rest is fixed at admission.

    The rest is also all a spec holds besides those two (width, EOS ids, early stopping,
    trie, normalization, and what the policy makes of them): requests whose specs are equal at
    one step have equal specs at every step, so the requests of a cohort share one
    `CohortSpecs` (`advance_cohorts`), and a spec the first of them builds serves them all."""

    policy: StepPolicy  # the policy they are built for (another one starts them anew)
    constraint: TrieConstraint | None  # the trie the request pinned at admission
    streams: bool  # a streamed beam request (the others have no spec)
    # [2 * first step + EOS blocked] -> the spec, None until a step needs it (a memo: the one
    # mutable part)
    specs: list[ExpansionSpec | None] = field(default_factory=lambda: [None] * 4)


def expansion_spec(state: RequestState, policy: StepPolicy) -> ExpansionSpec | None:
    """`state`'s spec at its current step; None: not a streamed beam request."""
    cached = state.cohort_specs
    if cached is None or cached.policy is not policy or cached.constraint is not state.constraint:
        search = state.search
        streams = isinstance(search, BeamSearch) and policy.streams(search.num_beams)
        cached = state.cohort_specs = CohortSpecs(policy, state.constraint, streams)
    if not cached.streams:
        return None
    first, eos_blocked = state.search.step == 0, state.eos_blocked
    variant = 2 * first + eos_blocked
    spec = cached.specs[variant]
    if spec is None:
        spec = cached.specs[variant] = _built_spec(state, policy, first, eos_blocked)
    return spec


def _built_spec(
    state: RequestState, policy: StepPolicy, first: bool, eos_blocked: bool
) -> ExpansionSpec:
    """`state`'s spec at a step that is its `first` or not, with EOS blocked or not."""
    search, constraint = state.beam_search, state.constraint
    width = policy.vocab_size if constraint is None else max(constraint.max_fanout, 1)
    normalization = state.resolved.spec.normalization
    if normalization == Normalization.SID:
        assert constraint is not None  # validation: SID needs a constrained request
        constraint.sid_columns(state.resolved.eos_ids)  # built now, outside any graph capture
    return ExpansionSpec(
        num_beams=search.num_beams,
        keep=search.keep,
        rows_each=1 if first else search.num_beams,
        eos_ids=state.resolved.eos_ids,  # host tuple: no device read
        block_eos=eos_blocked,
        early_stopping=search.early_stopping,
        wide=search.num_beams * min(search.keep, width) > policy.one_pass_limit,
        constraint=constraint,
        normalization=normalization,
    )


def cohort_key(state: RequestState, policy: StepPolicy, batch: bool = True) -> CohortKey | None:
    """Requests with equal keys advance together (step, length and length penalty are
    per-request scalars, so they are not in it); None: not a streamed beam request."""
    spec = expansion_spec(state, policy)
    return None if spec is None else _key(spec, state, batch)


def _key(spec: ExpansionSpec, state: RequestState, batch: bool) -> CohortKey:
    # The spec itself (hashed as it is) for a batchable request; a wide one, or any one
    # without `batch`, is a cohort of its own.
    return (spec, id(state)) if spec.wide or not batch else spec
