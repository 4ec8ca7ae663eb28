"""``paused_gc``: suspend the cyclic GC while building millions of small Python objects.

Creating 1.5M tuples/dicts triggers many full collections that re-scan every live object,
which made catalog parsing several times slower than the parsing itself. None of the objects
built here form cycles, so deferring collection loses nothing; the previous GC state is
restored on exit. The GC is process-wide, so overlapping uses from several threads may
re-enable it early; that only costs speed, never correctness.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
