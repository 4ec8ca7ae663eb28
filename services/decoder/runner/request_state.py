"""A request's life inside the engine: its reservation, rows, slot tables and decoder state, and
the one place a step's selection re-parents them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.kv.kv_reservation import KVReservation
from widebeam.services.decoder.requests.results import RequestOutput, build_output
from widebeam.services.decoder.requests.validation import ResolvedRequest
from widebeam.services.decoder.search.beam_search import BeamSearch
from widebeam.services.decoder.search.greedy import GreedySearch

if TYPE_CHECKING:
    from widebeam.services.decoder.runner.beam_cohorts import CohortSpecs


@dataclass
class RequestState:
    resolved: ResolvedRequest
    constraint: TrieConstraint | None  # pinned at admission (None: unconstrained)
    arrival: int
    pages: list[int] = field(default_factory=list)  # its prompt's pages, then private ones
    reservation: KVReservation | None = None  # running: the pages it holds, cached prefix first
    prompt_slots: torch.Tensor | None = None  # [prompt_len] int64
    private_slots: torch.Tensor | None = None  # [k * max_new_tokens] int64, (step, row) -> slot
    suffix_table: torch.Tensor | None = None  # [k, steps] int64, each row's generated-token slots
    pending_tokens: torch.Tensor | None = None  # [k] int64, selected but not yet forwarded
    nodes: torch.Tensor | None = None  # [k] int64 trie nodes (constrained only; [1] at first)
    search: BeamSearch | GreedySearch | None = None
    finished: bool = False
    # Built once for the request's life instead of at every step: its expansion specs
    # (`beam_cohorts.expansion_spec`) and its private slots split by step (`step_slots`).
    cohort_specs: CohortSpecs | None = field(default=None, repr=False, compare=False)
    _slot_rows: tuple[torch.Tensor, torch.Tensor] | None = field(
        default=None, init=False, repr=False, compare=False
    )  # (private_slots, its [max_new_tokens, k] view)

    @property
    def request_id(self) -> str:
        return self.resolved.spec.request_id

    @property
    def num_rows(self) -> int:
        return self.resolved.spec.beam_width

    @property
    def prompt_len(self) -> int:
        return len(self.resolved.spec.input_ids)

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.resolved.spec.input_ids

    @property
    def cached_prompt_tokens(self) -> int:
        """Prompt tokens whose KV a cached prefix already holds (prefill computes the rest)."""
        return 0 if self.reservation is None else self.reservation.cached_tokens

    @property
    def kv_slots(self) -> int:
        """KV slots reserved at admission: prompt + k x max_new_tokens."""
        return self.resolved.kv_slots

    @property
    def beam_search(self) -> BeamSearch:
        """The search of a beam request (k > 1)."""
        assert isinstance(self.search, BeamSearch)
        return self.search

    @property
    def eos_blocked(self) -> bool:
        """min_new_tokens not reached yet: EOS may not be chosen this step."""
        return self.search.step < self.resolved.spec.min_new_tokens

    @property
    def at_token_limit(self) -> bool:
        """The request has produced its last token: done, whatever its device flag says."""
        return self.search.step >= self.resolved.spec.max_new_tokens

    @property
    def remaining_steps(self) -> int:
        """Decode steps it may still take (all of them until it is admitted)."""
        done = 0 if self.search is None else self.search.step
        return self.resolved.spec.max_new_tokens - done

    def step_slots(self, step: int) -> torch.Tensor:  # [k] int64
        """The private slots of the rows step `step` appends (a view)."""
        cached = self._slot_rows
        if cached is None or cached[0] is not self.private_slots:
            assert self.private_slots is not None
            cached = self._slot_rows = (
                self.private_slots,
                self.private_slots.view(-1, self.num_rows),
            )
        return cached[1][step]

    def output(self) -> RequestOutput:
        """The finished request's answer (reads its search's host copies only)."""
        spec, constraint = self.resolved.spec, self.constraint
        finished = self.search.results(spec.return_logprobs)
        if constraint is None:
            return build_output(self.resolved, finished, None, None)
        items = constraint.items_for_paths(spec.input_ids, finished.paths)
        return build_output(self.resolved, finished, items, constraint.version)


def apply_selection(
    states: list[RequestState],  # B requests with the same k, at any steps
    parents: torch.Tensor,  # [B, k] int64 the row each new row extends
    tokens: torch.Tensor,  # [B, k] int64 the token each new row appends
    nodes: torch.Tensor | None,  # [B, k] int64 each new row's trie node (read if constrained)
) -> None:
    """Re-parent the rows' slot tables (gathering integers, never KV), append this step's
    private slots, take the pending tokens and the new trie nodes. Requests at the same step
    share one gather. Only queues device work; nothing changes if it fails."""
    by_step: dict[int, list[int]] = {}
    for b, state in enumerate(states):
        by_step.setdefault(state.suffix_table.shape[1], []).append(b)  # steps taken so far
    if len(by_step) == 1:  # a cohort in lockstep: one gather, no regrouping
        (step,) = by_step
        tables = list(_reparented(states, parents, step).unbind(0))  # [k, step + 1] each
    else:
        by_request: dict[int, torch.Tensor] = {}  # b -> [k, step + 1]
        for step, members in by_step.items():
            new = _reparented([states[b] for b in members], _rows(parents, members), step)
            by_request.update(zip(members, new.unbind(0), strict=True))
        tables = [by_request[b] for b in range(len(states))]
    # One unbind per tensor, not an indexing per request: views of the same rows.
    row_tokens = tokens.unbind(0)
    row_nodes = None if nodes is None else nodes.unbind(0)
    for b, state in enumerate(states):
        state.suffix_table = tables[b]
        state.pending_tokens = row_tokens[b]
        if state.constraint is not None:
            assert row_nodes is not None
            state.nodes = row_nodes[b]


def _reparented(
    states: list[RequestState],  # requests that have taken `step` steps
    parents: torch.Tensor,  # [B, k] int64
    step: int,
) -> torch.Tensor:  # [B, k, step + 1] int64
    tables = _stacked([s.suffix_table for s in states])  # [B, k, step]
    new_slots = _stacked([s.step_slots(step) for s in states])  # [B, k]
    gathered = tables.gather(1, parents[:, :, None].expand(-1, -1, step))
    return torch.cat((gathered, new_slots[:, :, None]), dim=2)


def _rows(batch: torch.Tensor, members: list[int]) -> torch.Tensor:  # [len(members), ...]
    """Rows `members` of `batch`: a view when they are consecutive (as a whole cohort is)."""
    first, last = members[0], members[-1]
    if members == list(range(first, last + 1)):
        return batch[first : last + 1]
    return batch[torch.tensor(members, device=batch.device)]


def _stacked(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[B, ...]: a view for a single request (no copy), else stacked."""
    return tensors[0][None] if len(tensors) == 1 else torch.stack(tensors)
