"""A decode step's inputs, gathered from the running requests' state."""

from __future__ import annotations

import numpy as np
import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.services.decoder.host_copies import to_device_async
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.runner.step_inputs import DecodeInputs


def decode_inputs(states: list[RequestState], device: torch.device) -> DecodeInputs:
    """Rows of `states` back to back. Only queues device work (no host reads)."""
    groups, tokens, writes = [], [], []
    positions, widths = [], []  # per request: its rows' position, its row count
    row = 0
    for state in states:
        width, table = state.num_rows, state.suffix_table
        groups.append(DecodeGroup(row, width, state.prompt_slots, table))
        tokens.append(state.pending_tokens)
        writes.append(table[:, -1])
        # The pending token is generated token number `step - 1`.
        positions.append(state.prompt_len + state.search.step - 1)
        widths.append(width)
        row += width
    # One numpy repeat for every row: building the list row by row costs more than the step.
    row_positions = np.repeat(np.array(positions, dtype=np.int64), widths)  # [R] int64
    return DecodeInputs(
        torch.cat(tokens),
        to_device_async(torch.from_numpy(row_positions), device),
        torch.cat(writes),
        DecodeBatch(tuple(groups)),
    )
