"""How many forwards the engine ran, how full they were, and how much of its time it worked.

A closed loop of clients whose answers reach them at different times sends its next requests
apart, so the engine prefills them in separate forwards, steps them in fuller or emptier decode
batches, and may wait for work between steps; requests per prefill forward, rows per decode
forward, beam expansions per request and the share of wall time spent in steps show it (the
stack bench reports them per path, next to the in-process engine's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepCounts:
    """Written by the engine thread only; plain numbers, so any thread may read them."""

    prefill_forwards: int = 0
    prefilled_requests: int = 0
    prefill_tokens: int = 0  # prompt tokens computed (cached prefixes not counted)
    # prefill forwards launched op by op: past the graph limit (MAX_PREFILL_GRAPH_TOKENS too low
    # for the batches this traffic makes), or with no prefill graphs (CPU, PREFILL_GRAPHS off);
    # and batches past the limit run as graph-sized batches (`prefill_graph_split`) instead
    eager_prefills: int = 0
    split_prefills: int = 0
    decode_forwards: int = 0
    decode_rows: int = 0  # rows over all decode forwards (before padding to a graph bucket)
    beam_expansions: int = 0  # streamed beam steps launched: one per cohort batch
    step_seconds: float = 0.0  # wall time inside `Engine.step` (host and device work, waits)
    # a server's intakes that waited for a group's next requests (`AsyncEngine.group_wait_s`)
    group_waits: int = 0
    group_wait_seconds: float = 0.0
    # a server's requests its engine thread took from the inbox (submitted to the engine, or
    # refused there), and the time they waited in it (from the call): up to a step for one
    # that arrives after the intakes of the step that runs
    inbox_requests: int = 0
    inbox_seconds: float = 0.0
