"""What `AsyncEngine` hands back besides results: its errors and its load snapshot."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from widebeam.services.decoder.requests.spec import GenerationRequest

if TYPE_CHECKING:
    from widebeam.services.decoder.server.served_catalog import ServedCatalog

# Runs on the engine thread, so the catalog it reads is the one `Engine.submit` pins next.
Prepare = Callable[[Mapping[str, "ServedCatalog"]], GenerationRequest]


class RequestWork(NamedTuple):
    """What a request will ask of the engine, for admission by predicted wait."""

    rows: int  # beam width
    steps: int  # decode steps, at most

    @classmethod
    def of(cls, request: GenerationRequest) -> RequestWork:
        return cls(request.beam_width, request.max_new_tokens)


class Overloaded(Exception):
    """The waiting queue is full, or the request's predicted wait exceeds its budget."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # from the queue; None: not predicted yet


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
    queued_work: int = 0  # rows x steps still to run, waiting and running requests
    waiting_rows: int = 0  # rows of the waiting ones
