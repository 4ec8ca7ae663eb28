"""`apply_selection` re-parents each request's slot table and takes its new tokens and trie
nodes, for cohorts in lockstep and for requests at different steps."""

from __future__ import annotations

import torch

from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.requests.validation import ResolvedRequest
from widebeam.services.decoder.runner.request_state import RequestState, apply_selection

K, MAX_NEW = 3, 4


def _request(steps: int, seed: int, constrained: bool = True) -> RequestState:
    gen = torch.Generator().manual_seed(seed)
    spec = GenerationRequest(f"r{seed}", (1,), beam_width=K, n=1, max_new_tokens=MAX_NEW)
    constraint = object() if constrained else None  # only its presence is read
    state = RequestState(ResolvedRequest(spec, (), 1 + K * MAX_NEW), constraint, seed)  # type: ignore[arg-type]
    state.suffix_table = torch.randint(0, 1000, (K, steps), generator=gen)
    state.private_slots = torch.randint(1000, 2000, (K * MAX_NEW,), generator=gen)
    return state


def _expected(state: RequestState, parents: torch.Tensor) -> torch.Tensor:
    steps = state.suffix_table.shape[1]
    new = state.private_slots[steps * K : (steps + 1) * K]
    return torch.cat((state.suffix_table[parents], new[:, None]), dim=1)


def _apply(states: list[RequestState], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    batch = len(states)
    parents = torch.randint(0, K, (batch, K), generator=gen)
    tokens = torch.randint(0, 50, (batch, K), generator=gen)
    nodes = torch.randint(0, 70, (batch, K), generator=gen)
    want = [_expected(s, parents[b]) for b, s in enumerate(states)]
    apply_selection(states, parents, tokens, nodes)
    for b, state in enumerate(states):
        assert torch.equal(state.suffix_table, want[b])
        assert torch.equal(state.pending_tokens, tokens[b])
        if state.constraint is None:
            assert state.nodes is None
        else:
            assert torch.equal(state.nodes, nodes[b])


def test_a_cohort_in_lockstep() -> None:
    _apply([_request(2, seed) for seed in range(3)], 0)


def test_requests_at_different_steps() -> None:
    states = [_request(1, 0), _request(0, 1, constrained=False), _request(1, 2), _request(3, 3)]
    _apply(states, 1)


def test_one_request_at_its_first_step() -> None:
    _apply([_request(0, 4)], 2)
