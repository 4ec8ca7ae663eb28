"""How many forwards the engine ran and how many requests shared them: how well arrivals batch.

A closed loop of clients whose answers reach them at different times sends its next requests
apart, so the engine prefills them in separate forwards and steps them in separate cohorts;
requests per prefill forward and per beam expansion show it (the stack bench reports both per
path, next to the in-process engine's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepCounts:
    """Written by the engine thread only; plain ints, so any thread may read them."""

    prefill_forwards: int = 0
    prefilled_requests: int = 0
    decode_forwards: int = 0
    beam_expansions: int = 0  # streamed beam steps launched: one per lockstep cohort
