"""Which decoder replica a call tries first: the rule alone, plain data in, an order out (no I/O).

A call's work is its rows x decode steps (beam_width x max_new_tokens for Generate, beam_width x
SID length for Recommend). Replicas that are up come first, least outstanding work first: the
work of this gateway's own calls in flight on each (exact and live), then the load the replica
itself last reported through GetInfo (rows in use + requests waiting: it also counts other
gateways' and other gateway workers' calls, but is only as fresh as the last poll). Replicas equal
on both take turns (their group rotated by one per call), so equally loaded replicas share calls
round robin. Replicas cooling down after an UNAVAILABLE come last, in ring order, as a last resort.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

# The decoder's defaults for fields a request leaves out (decoder.proto), and the steps of a
# Recommend before any GetInfo told the SID length.
DEFAULT_MAX_NEW_TOKENS = 16
DEFAULT_RECOMMEND_N = 10
UNKNOWN_SID_LENGTH = 1


@dataclass(frozen=True)
class ReplicaLoad:
    up: bool  # not cooling down after an UNAVAILABLE
    outstanding_work: int  # rows x steps of this gateway's calls in flight on it now
    reported_load: int  # its last GetInfo: rows in use + waiting requests (0 when unknown)


def call_work(beam_width: int, steps: int) -> int:
    """Rows x steps of one call (at least 1: every call costs something)."""
    return max(1, beam_width) * max(1, steps)


def replica_order(loads: list[ReplicaLoad], rotation: int) -> list[int]:
    """Indices into `loads` in the order a call tries them; `rotation` is the call's turn."""
    count = len(loads)
    if count == 0:
        return []
    start = rotation % count
    ring = [(start + offset) % count for offset in range(count)]
    down = [i for i in ring if not loads[i].up]
    order: list[int] = []
    # Each group of equally loaded replicas rotates on its own, so a busier replica elsewhere
    # in the ring does not give the replica after it more turns than its equals.
    up = sorted((i for i in range(count) if loads[i].up), key=lambda i: _key(loads[i]))
    for _, group in itertools.groupby(up, key=lambda i: _key(loads[i])):
        tied = list(group)
        turn = rotation % len(tied)
        order += tied[turn:] + tied[:turn]
    return order + down


def _key(load: ReplicaLoad) -> tuple[int, int]:
    return load.outstanding_work, load.reported_load
