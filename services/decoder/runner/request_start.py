"""Turning an admitted request's reservation into its slot tables and decoding strategy."""

from __future__ import annotations

import torch

from widebeam.services.decoder.host_copies import to_device_async
from widebeam.services.decoder.kv.kv_cache import slots_of_pages
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.search.beam_search import BeamSearch
from widebeam.services.decoder.search.greedy import GreedySearch
from widebeam.services.decoder.search.sampling import SamplingParams


def start_request(state: RequestState, page_size: int, device: torch.device) -> None:
    """Split the reserved pages into prompt slots and (step, row) private slots, and create the
    beam search (k > 1) or greedy/sampling search (k = 1) with the request's parameters."""
    spec, k = state.resolved.spec, state.num_rows
    slots = slots_of_pages(state.pages, page_size, device)
    state.prompt_slots = slots[: state.prompt_len]
    state.private_slots = slots[state.prompt_len : state.prompt_len + k * spec.max_new_tokens]
    state.suffix_table = torch.empty((k, 0), dtype=torch.int64, device=device)
    eos = to_device_async(torch.tensor(state.resolved.eos_ids, dtype=torch.int64), device)
    if k == 1:
        params = SamplingParams(spec.temperature, spec.top_p, spec.top_k, spec.seed)
        state.search = GreedySearch(
            params, spec.length_penalty, eos, spec.max_new_tokens, spec.min_new_tokens, device
        )
    else:
        state.search = BeamSearch(
            k, spec.n, spec.length_penalty, spec.early_stopping, eos, spec.max_new_tokens, device
        )
    if state.constraint is not None:
        # One start node for the prompt; the k rows fan out from it at the first step.
        start = state.constraint.start_node(spec.input_ids)
        state.nodes = torch.full((1,), start, dtype=torch.int64, device=device)
