"""A request's life inside the engine: its reservation, rows, slot tables and decoder state."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from widebeam.services.decoder.beam.beam_search import BeamSearch
from widebeam.services.decoder.beam.greedy_search import GreedySearch
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.requests.results import RequestOutput, build_output
from widebeam.services.decoder.requests.validation import ResolvedRequest


@dataclass
class RequestState:
    resolved: ResolvedRequest
    constraint: TrieConstraint | None  # pinned at admission (None: unconstrained)
    arrival: int
    pages: list[int] = field(default_factory=list)
    prompt_slots: torch.Tensor | None = None  # [prompt_len] int64
    private_slots: torch.Tensor | None = None  # [k * max_new_tokens] int64, (step, row) -> slot
    suffix_table: torch.Tensor | None = None  # [k, steps] int64, each row's generated-token slots
    pending_tokens: torch.Tensor | None = None  # [k] int64, selected but not yet forwarded
    nodes: torch.Tensor | None = None  # [k] int64 trie nodes (constrained only)
    search: BeamSearch | GreedySearch | None = None
    finished: bool = False

    @property
    def request_id(self) -> str:
        return self.resolved.spec.request_id

    @property
    def num_rows(self) -> int:
        return self.resolved.spec.beam_width

    @property
    def prompt_len(self) -> int:
        return len(self.resolved.spec.input_ids)

    def output(self) -> RequestOutput:
        """The finished request's answer (reads its search's host copies only)."""
        spec, constraint = self.resolved.spec, self.constraint
        finished = self.search.results(spec.return_logprobs)
        if constraint is None:
            return build_output(self.resolved, finished, None, None)
        items = constraint.items_for_paths(spec.input_ids, finished.paths)
        return build_output(self.resolved, finished, items, constraint.version)
