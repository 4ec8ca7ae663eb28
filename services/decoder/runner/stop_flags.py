"""Beam requests' stop decisions, read from the device in one batch per step.

A beam step leaves each request's `done` on the device (`BeamSearch.done_flag`). `stage_flags`
queues one copy of all of them, after the step's host copies of the search state, and records
an event; `resolve_flags` waits for that event only. With overlap scheduling the next step's
forward is already queued behind the copy, so the host learns who finished while the device
keeps working.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.services.decoder.host_copies import to_host_async
from widebeam.services.decoder.runner.request_state import RequestState


class StagedFlags(NamedTuple):
    states: list[RequestState]  # beam requests, each advanced in the staged step
    flags: torch.Tensor  # [n] bool on the host (pinned when copied from a GPU)
    steps: list[int]  # each search's steps taken when its flag was staged
    event: torch.cuda.Event | None  # recorded after the copy (None on the CPU)


def stage_flags(states: list[RequestState]) -> StagedFlags:
    flags = torch.stack([s.beam_search.done_flag for s in states])  # [n] bool
    steps = [s.beam_search.step for s in states]
    if not flags.is_cuda:
        return StagedFlags(states, flags, steps, None)
    host = to_host_async(flags)
    event = torch.cuda.Event()
    event.record()
    return StagedFlags(states, host, steps, event)


def resolve_flags(staged: StagedFlags) -> None:
    """Wait for the staged copy and hand each search its decision."""
    if staged.event is not None:
        staged.event.synchronize()
    decisions = zip(staged.states, staged.flags.tolist(), staged.steps, strict=True)
    for state, done, step in decisions:
        state.beam_search.resolve_done(done, step)
