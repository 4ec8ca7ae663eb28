"""How many CUDA graphs were captured, by graph kind and by phase: before the decoder reported
ready (start-up) or while serving (the lazy fallback, which should stay 0)."""

from __future__ import annotations

from enum import StrEnum


class GraphKind(StrEnum):
    """What a captured graph runs (the `kind` label of the capture counter)."""

    DECODE = "decode"
    PREFILL = "prefill"
    EXPANSION = "expansion"


class CapturePhase(StrEnum):
    STARTUP = "startup"  # before ready
    SERVING = "serving"  # after ready: a shape the start-up list missed


class CaptureCounts:
    """Written by the engine thread only; read by any (every key exists from the start, so a
    reader never sees the mapping change size)."""

    def __init__(self) -> None:
        self.ready = False
        self.counts: dict[tuple[GraphKind, CapturePhase], int] = {
            (kind, phase): 0 for kind in GraphKind for phase in CapturePhase
        }

    def record(self, kind: GraphKind) -> None:
        phase = CapturePhase.SERVING if self.ready else CapturePhase.STARTUP
        self.counts[kind, phase] += 1

    def mark_ready(self) -> None:
        """From now on every capture counts as one while serving."""
        self.ready = True

    def total(self, phase: CapturePhase) -> int:
        return sum(n for (_, p), n in self.counts.items() if p == phase)
