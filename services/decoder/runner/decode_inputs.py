"""A decode step's inputs, gathered from the running requests' state."""

from __future__ import annotations

import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.services.decoder.host_copies import to_device_async
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.runner.step_inputs import DecodeInputs


def decode_inputs(states: list[RequestState], device: torch.device) -> DecodeInputs:
    """Rows of `states` back to back. Only queues device work (no host reads)."""
    groups, tokens, positions, writes = [], [], [], []
    row = 0
    for state in states:
        step = state.search.step - 1  # index of the pending token among generated tokens
        groups.append(DecodeGroup(row, state.num_rows, state.prompt_slots, state.suffix_table))
        tokens.append(state.pending_tokens)
        positions += [state.prompt_len + step] * state.num_rows
        writes.append(state.suffix_table[:, -1])
        row += state.num_rows
    return DecodeInputs(
        torch.cat(tokens),
        to_device_async(torch.tensor(positions, dtype=torch.int64), device),
        torch.cat(writes),
        DecodeBatch(tuple(groups)),
    )
