"""The demo build's progress bars: one look for every step — on stderr, with rate and ETA,
cleared when the step ends (its summary line follows). In a log rather than a terminal a bar
redraws every 15 s, so a long step leaves a few lines there, not hundreds."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")

TERMINAL_REDRAW_S = 0.1
LOG_REDRAW_S = 15.0


def progress_bar(
    step: str, unit: str, enabled: bool, total: int | None = None, items: Iterable[T] | None = None
) -> tqdm:
    """A bar for `step` counting `unit`s (over `items` when given); a no-op unless `enabled`."""
    redraw = TERMINAL_REDRAW_S if sys.stderr.isatty() else LOG_REDRAW_S
    return tqdm(items, desc=f"demo: {step}", total=total, unit=unit, disable=not enabled,
                leave=False, file=sys.stderr, mininterval=redraw)  # fmt: skip
