"""What a caller asks of the engine: `GenerationRequest` (a plain frozen dataclass), its enums,
and the error a request the engine cannot run raises."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

EarlyStopping = bool | Literal["never"]


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
