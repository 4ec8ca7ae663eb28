"""A beam step's outputs queued to the host: two copies per step for a whole cohort.

`BeamSearch.results` rebuilds the finished hypotheses from these host copies alone, so a
request's output never waits on the device. A cohort of B requests copies its packed [B, ·, k]
outputs (`step_outputs.py`) once; each request keeps views of its own row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.services.decoder.host_copies import to_host_async
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs


class HostStep(NamedTuple):
    history: tuple[torch.Tensor, torch.Tensor]  # [2, k] int64 (parents, tokens), [k] fp32
    # finished slots: [4, k] int64 (step, parent, token, returnable), [3, k] fp32 (score,
    # cumulative log-prob, last token's log-prob)
    finished: tuple[torch.Tensor, torch.Tensor]


def stage_on_host(outputs: StepOutputs) -> list[HostStep]:
    """Queue the step's host copies (no wait); one `HostStep` per request of the batch."""
    ints, floats = to_host_async(outputs.ints), to_host_async(outputs.floats)
    return [
        HostStep((ints[b, :2], floats[b, 0]), (ints[b, 2:6], floats[b, 1:4]))
        for b in range(ints.shape[0])
    ]
