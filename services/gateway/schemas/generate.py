"""SGLang's native `POST /generate` request body (its `GenerateReqInput` and `SamplingParams`),
as far as widebeam serves it, plus widebeam's `constrained` / `catalog` / `normalization`
extensions inside `sampling_params`.

A prompt is `text` or `input_ids`, one (a string, a list of ids) or a batch (a list of either);
`sampling_params` is one object for every prompt or a list of one per prompt. Fields SGLang
defines that widebeam cannot honour are accepted only at their neutral value and are a 400
naming the field otherwise (`unsupported` below), never silently ignored; unknown fields are
a 400 too."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from widebeam.services.gateway.normalization import NORMALIZATION_DOC, Normalization
from widebeam.services.gateway.schemas.common import Bool, Float, Int, Text
from widebeam.services.gateway.schemas.completions import INT32, TokenId
from widebeam.services.http.errors import bad_request

T = TypeVar("T")

# SGLang's default for max_new_tokens (its SamplingParams).
DEFAULT_MAX_NEW_TOKENS = 128
# Prompts of one batch request; each is one decoder call.
MAX_BATCH_PROMPTS = 1024


class SamplingParams(BaseModel):
    """One prompt's `sampling_params`. SGLang's beam search takes the width from `n` (and
    returns that many beams); `beam_width` sets the width apart from `n` (n <= beam_width)."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: Int | None = Field(
        None, ge=1, lt=INT32, description=f"default {DEFAULT_MAX_NEW_TOKENS}, as in SGLang"
    )
    min_new_tokens: Int | None = Field(None, ge=0, lt=INT32)
    n: Int | None = Field(
        None, ge=1, lt=INT32, description="beams returned; default beam_width, else 1"
    )
    beam_width: Int | None = Field(None, ge=1, lt=INT32, description="beams searched; default n")
    use_beam_search: Bool | None = Field(
        None, description="accepted (SGLang's flag); a width above 1 is always beam search"
    )
    temperature: Float | None = Field(
        None, ge=0, le=2, allow_inf_nan=False, description="0 / unset: greedy or beam search"
    )
    top_p: Float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    top_k: Int | None = Field(None, ge=-1, lt=INT32, description="-1 or 0: the whole vocabulary")
    sampling_seed: Int | None = Field(None, ge=-(2**63), lt=2**63)
    ignore_eos: Bool = False
    stop_token_ids: list[TokenId] | None = Field(
        None, description="token ids that end a sequence, besides the model's EOS"
    )
    skip_special_tokens: Bool = Field(True, description="leave special tokens out of `text`")
    no_stop_trim: Bool = False
    stop: Text | list[Text] | None = None
    frequency_penalty: Float | None = Field(None, allow_inf_nan=False)
    presence_penalty: Float | None = Field(None, allow_inf_nan=False)
    repetition_penalty: Float | None = Field(None, allow_inf_nan=False)
    min_p: Float | None = Field(None, allow_inf_nan=False)
    regex: Text | None = None
    json_schema: Text | None = None
    ebnf: Text | None = None
    logit_bias: dict[str, Float] | None = None
    # widebeam extensions
    constrained: Bool = Field(False, description="only catalog SIDs (walk the catalog trie)")
    catalog: Text | None = Field(None, description="catalog of a constrained request")
    # Bounded: the decoder raises `(steps + 1) ** length_penalty`, which overflows past ~±100.
    length_penalty: Float | None = Field(None, ge=-20, le=20, allow_inf_nan=False)
    early_stopping: Bool | Literal["never"] | None = None
    normalization: Normalization = Field("vocab", description=NORMALIZATION_DOC)


PromptIds = list[TokenId]
PROMPT_TEXT = TypeAdapter(Text)
BATCH_TEXT = TypeAdapter(list[Text])
PROMPT_IDS = TypeAdapter(PromptIds)
BATCH_IDS = TypeAdapter(list[PromptIds])


class GenerateRequest(BaseModel):
    """`POST /generate` (SGLang's GenerateReqInput): `text` or `input_ids`, one or a batch.

    `text`, `input_ids` and `sampling_params` are read per prompt by `prompt_inputs` (routes),
    so an error names its place: `text[2]`, `input_ids[1][3]`, `sampling_params[2].n`."""

    model_config = ConfigDict(extra="forbid")

    text: Any = Field(None, description="one prompt (a string), or a list of them (a batch)")
    input_ids: list[Any] | None = Field(
        None, description="token ids of one prompt, or a list of them (a batch)"
    )
    sampling_params: dict[str, Any] | list[dict[str, Any]] | None = Field(
        None, description="one object for every prompt, or a list of one per prompt"
    )
    rid: Text | list[Text] | None = Field(None, description="request id(s), echoed as meta_info.id")
    stream: Bool = False
    return_logprob: Bool | list[Bool] | None = None


def read(adapter: TypeAdapter[T], value: object, where: str) -> T:
    """`value` validated by `adapter`, or a 400 naming the first bad place under `where`."""
    try:
        return adapter.validate_python(value, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        field = f"{where}{path}"
        if first["type"] == "extra_forbidden":
            message = f"unknown field {field!r} (not supported by this API)"
        else:
            message = f"{field}: {str(first['msg']).removeprefix('Value error, ')}"
        raise bad_request(message, code="invalid_request", param=field) from None


SAMPLING_PARAMS = TypeAdapter(SamplingParams)


def unsupported(params: SamplingParams, where: str) -> None:
    """400 for SGLang sampling features widebeam does not implement, naming the field."""
    checks: list[tuple[str, bool, str]] = [
        ("stop", bool(params.stop), "stop strings are not supported; use stop_token_ids"),
        ("frequency_penalty", bool(params.frequency_penalty), "only 0 is supported"),
        ("presence_penalty", bool(params.presence_penalty), "only 0 is supported"),
        (
            "repetition_penalty",
            params.repetition_penalty not in (None, 1.0),
            "only 1 is supported",
        ),
        ("min_p", bool(params.min_p), "only 0 is supported"),
        ("regex", params.regex is not None, "grammars are not supported; use constrained"),
        ("json_schema", params.json_schema is not None, "grammars are not supported"),
        ("ebnf", params.ebnf is not None, "grammars are not supported"),
        ("logit_bias", bool(params.logit_bias), "not supported"),
        ("no_stop_trim", params.no_stop_trim, "not supported: output_ids end with the stop token"),
    ]
    for field, bad, why in checks:
        if bad:
            raise bad_request(
                f"{where}.{field}: {why}", code="unsupported_parameter", param=f"{where}.{field}"
            )


def unsupported_request(body: GenerateRequest) -> None:
    """400 for request-level SGLang features widebeam does not implement."""
    logprobs = body.return_logprob
    if body.stream:
        raise bad_request(
            "stream: streaming is not supported; set stream=false",
            code="unsupported_parameter",
            param="stream",
        )
    if logprobs is True or (isinstance(logprobs, list) and any(logprobs)):
        raise bad_request(
            "return_logprob: log-probabilities are not returned by /generate; use "
            "/v1/completions with logprobs=0",
            code="unsupported_parameter",
            param="return_logprob",
        )
