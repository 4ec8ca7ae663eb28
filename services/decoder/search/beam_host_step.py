"""A beam step's outputs queued to the host: two copies per step for a whole cohort.

`BeamSearch.results` rebuilds the finished hypotheses from these host copies alone, so a
request's output never waits on the device. A cohort of B requests copies its packed [B, ·, k]
outputs (`beam_step_outputs.py`) once; each request keeps views of its own row, read by the
packed layout's names (`IntRow`, `FloatRow`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.services.decoder.host_copies import to_host_async
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs


class HostStep(NamedTuple):
    """One request's packed step on the host (pinned when copied from a GPU): its selection
    (parents, tokens, log-probs) and its finished slots."""

    ints: torch.Tensor  # [len(IntRow), k] int64
    floats: torch.Tensor  # [len(FloatRow), k] fp32


def stage_on_host(outputs: StepOutputs) -> list[HostStep]:
    """Queue the step's host copies (no wait); one `HostStep` per request of the batch."""
    ints, floats = to_host_async(outputs.ints), to_host_async(outputs.floats)
    # unbind: every request's row view in one call each, not two indexings per request.
    return list(map(HostStep, ints.unbind(0), floats.unbind(0)))
