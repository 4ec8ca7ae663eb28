"""What a caller asks of the engine, and what it gets back (plain dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, NamedTuple

EarlyStopping = bool | Literal["never"]
FinishReason = Literal["stop", "length"]


class Normalization(StrEnum):
    """What log-probs (scores, returned logprobs) are normalised over."""

    VOCAB = "vocab"  # the whole vocabulary, as transformers does
    # Only the SID layout's tokens plus the request's first EOS, as if every other logit were
    # -inf (constrained requests only; the LM head then computes those columns alone).
    SID = "sid"


class RequestError(ValueError):
    """A request the engine cannot run; the message says what is wrong with it."""


def normalization_from(value: object) -> Normalization:
    """`value` (a member or its string) as a Normalization; RequestError naming the choices."""
    if isinstance(value, str) and value in tuple(Normalization):
        return Normalization(value)
    choices = " or ".join(f'"{member.value}"' for member in Normalization)
    raise RequestError(f"normalization must be {choices}, got {value!r}")


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    input_ids: tuple[int, ...]
    beam_width: int = 1
    n: int = 1
    max_new_tokens: int = 16
    min_new_tokens: int = 0
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    # None: the model's default (generation_config.json, else config.json); () disables EOS.
    eos_token_id: tuple[int, ...] | None = None
    ignore_eos: bool = False
    constrained: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    return_logprobs: bool = False
    catalog: str | None = None  # constrained requests: catalog name (None: DEFAULT_CATALOG)
    normalization: Normalization = Normalization.VOCAB


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

    @property
    def ok(self) -> bool:
        return self.error is None
