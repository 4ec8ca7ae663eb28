"""What a request gets back: the hypotheses a finished search hands over, column by column
(`FinishedBeams`), and the caller-facing `RequestOutput` of `BeamResult`s built from them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from widebeam.services.decoder.requests.validation import ResolvedRequest

FinishReason = Literal["stop", "length"]


class FinishedBeams(NamedTuple):
    """A finished request's returned hypotheses, best first, column by column (a wide request
    returns thousands: one Python object per hypothesis is built later, once)."""

    tokens: list[list[int]]
    token_logprobs: list[list[float]] | None  # None unless asked for
    scores: list[float]
    cum_logprobs: list[float]
    paths: np.ndarray  # [m, L] int64 the same tokens, -1 after each hypothesis' end

    @classmethod
    def empty(cls) -> FinishedBeams:
        return cls([], None, [], [], np.zeros((0, 0), dtype=np.int64))


class BeamResult(NamedTuple):
    """One returned hypothesis (a tuple: a 5000-beam request builds 5000 of them per answer)."""

    output_ids: list[int]
    # transformers' `sequences_scores`: cum_logprob / len(output_ids) ** length_penalty
    score: float
    cum_logprob: float
    finish_reason: FinishReason
    logprobs: list[float] | None = None
    item_ids: list[str] | None = None  # constrained requests: the catalog items of this SID


@dataclass(frozen=True)
class RequestOutput:
    request_id: str | None
    beams: list[BeamResult] = field(default_factory=list)
    error: str | None = None
    catalog_version: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, those read from the prefix cache

    @property
    def ok(self) -> bool:
        return self.error is None


def build_output(
    resolved: ResolvedRequest,
    finished: FinishedBeams,
    items: Sequence[list[str]] | None,  # constrained requests: each hypothesis' catalog items
    catalog_version: str | None,  # the catalog version the request pinned (constrained only)
) -> RequestOutput:
    spec = resolved.spec
    eos = set(resolved.eos_ids)
    count = len(finished.tokens)
    item_column: Sequence[list[str] | None] = [None] * count if items is None else items
    logprobs = finished.token_logprobs or [None] * count
    tokens = finished.tokens
    reasons = ["length"] * count
    if eos:
        reasons = ["stop" if t and t[-1] in eos else "length" for t in tokens]
    # Tuples made straight from the columns: wide requests build thousands per answer.
    columns = (tokens, finished.scores, finished.cum_logprobs, reasons, logprobs, item_column)
    beams = list(map(BeamResult._make, zip(*columns, strict=True)))
    return RequestOutput(
        spec.request_id, beams, catalog_version=catalog_version, prompt_tokens=len(spec.input_ids)
    )
