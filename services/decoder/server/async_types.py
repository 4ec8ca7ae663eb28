"""What `AsyncEngine` hands back besides results: its errors and its load snapshot."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.served_catalog import ServedCatalog

# Runs on the engine thread, so the catalog it reads is the one `Engine.submit` pins next.
Prepare = Callable[[Mapping[str, ServedCatalog]], GenerationRequest]


class Overloaded(Exception):
    """The waiting queue is full."""


class EngineFailure(Exception):
    """The engine raised while running this request (other requests are unaffected)."""


class ShuttingDown(Exception):
    """The server is stopping and takes no more work."""


@dataclass(frozen=True)
class EngineLoad:
    rows_in_use: int = 0
    running: int = 0
    waiting: int = 0  # accepted, not yet admitted to rows
    kv_slots_free: int = 0
