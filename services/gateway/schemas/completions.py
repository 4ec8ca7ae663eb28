"""OpenAI-compatible `/v1/completions` and `/v1/chat/completions` request bodies.

Fields OpenAI defines that widebeam cannot honour are accepted only at their neutral value
(e.g. `echo=false`, penalties 0) and answered with a 400 otherwise, never silently ignored
(`unsupported` below). Unknown fields are a 400 too. `stream=true` is served as Server-Sent
Events (`streaming.py`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from widebeam.services.gateway.normalization import NORMALIZATION_DOC, Normalization
from widebeam.services.gateway.schemas.common import Bool, Float, Int, Text
from widebeam.services.http.errors import bad_request

TokenId = Annotated[Int, Field(ge=0, lt=2**31)]
INT32 = 2**31  # proto int32 fields: larger values must be a 400 here, not a ValueError later


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: Bool | None = Field(
        None, description="a last chunk, with no choices, carries the usage"
    )


class BeamFields(BaseModel):
    """Sampling / beam parameters shared by both endpoints; the beam ones are extensions."""

    model_config = ConfigDict(extra="forbid")

    model: Text | None = Field(
        None, description="one of the served model's names (GET /v1/models); default: it"
    )
    max_tokens: Int | None = Field(None, ge=1, lt=INT32, description="default 16")
    temperature: Float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: Float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    n: Int = Field(1, ge=1, lt=INT32, description="choices returned; <= beam_width")
    seed: Int | None = Field(None, ge=-(2**63), lt=2**63)
    user: Text | None = Field(None, description="accepted and ignored")
    stream: Bool | None = Field(False, description="answer as Server-Sent Events")
    stream_options: StreamOptions | None = None
    stop: Text | list[Text] | None = None
    presence_penalty: Float | None = Field(None, allow_inf_nan=False)
    frequency_penalty: Float | None = Field(None, allow_inf_nan=False)
    logit_bias: dict[str, Float] | None = None
    # widebeam extensions
    beam_width: Int | None = Field(
        None, ge=1, lt=INT32, description="beam search with this many beams"
    )
    constrained: Bool | None = Field(
        None,
        description="only catalog SIDs (walk the catalog trie); default: the gateway's "
        "default_constrained for the requested model name, else false",
    )
    catalog: Text | None = Field(None, description="catalog of a constrained request")
    # Bounded: the decoder raises `(steps + 1) ** length_penalty`, which overflows past ~±100.
    length_penalty: Float | None = Field(None, ge=-20, le=20, allow_inf_nan=False)
    early_stopping: Bool | Literal["never"] | None = None
    min_tokens: Int | None = Field(None, ge=0, lt=INT32)
    top_k: Int | None = Field(None, ge=0, lt=INT32)
    ignore_eos: Bool = False
    normalization: Normalization = Field("vocab", description=NORMALIZATION_DOC)


class CompletionRequest(BeamFields):
    prompt: Text | list[TokenId] | list[Text] | list[list[TokenId]]
    logprobs: Int | None = Field(
        None, ge=0, le=5, description="0: log-probabilities of the returned tokens"
    )
    echo: Bool | None = False
    suffix: Text | None = None
    best_of: Int | None = Field(None, ge=1)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: Text | None = None

    def as_template_input(self) -> dict[str, str]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        # "developer" is OpenAI's newer name for "system"; model templates know "system".
        role = "system" if self.role == "developer" else self.role
        return {"role": role, "content": content or ""}


class ChatCompletionRequest(BeamFields):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: Bool | None = False
    top_logprobs: Int | None = Field(None, ge=0, le=20)
    max_completion_tokens: Int | None = Field(
        None, ge=1, lt=INT32, description="alias of max_tokens (both given: they must be equal)"
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None,
        description="variables for the model's chat template, as transformers' "
        'apply_chat_template(**kwargs) passes them (e.g. {"enable_thinking": false})',
    )

    def new_tokens(self) -> int | None:
        """`max_completion_tokens` or `max_tokens` (OpenAI's newer and older name); a client
        may send both (FlashRec's do) when they agree."""
        both = (self.max_tokens, self.max_completion_tokens)
        if None not in both and both[0] != both[1]:
            raise bad_request(
                f"max_tokens ({both[0]}) and max_completion_tokens ({both[1]}) differ; give "
                "one of them, or the same value in both",
                param="max_completion_tokens",
            )
        return self.max_completion_tokens or self.max_tokens


def unsupported(body: BeamFields) -> None:
    """400 for OpenAI features widebeam does not implement, naming the field."""
    checks: list[tuple[str, bool, str]] = [
        (
            "stream_options",
            body.stream_options is not None and not body.stream,
            "only allowed with stream=true",
        ),
        ("stop", bool(body.stop), "stop sequences are not supported; use max_tokens / EOS"),
        ("presence_penalty", bool(body.presence_penalty), "only 0 is supported"),
        ("frequency_penalty", bool(body.frequency_penalty), "only 0 is supported"),
        ("logit_bias", bool(body.logit_bias), "not supported"),
    ]
    if isinstance(body, CompletionRequest):
        checks += [
            ("echo", bool(body.echo), "echo is not supported"),
            ("suffix", body.suffix is not None, "suffix (insertion) is not supported"),
            ("best_of", (body.best_of or 1) > 1, "not supported; use beam_width"),
            (
                "logprobs",
                bool(body.logprobs),
                "only logprobs=0 is supported: the log-probability of each returned token, "
                "without alternatives",
            ),
        ]
    if isinstance(body, ChatCompletionRequest):
        checks.append(
            (
                "top_logprobs",
                bool(body.top_logprobs),
                "alternatives are not available; use logprobs=true with top_logprobs 0",
            )
        )
    for field, bad, why in checks:
        if bad:
            raise bad_request(f"{field}: {why}", code="unsupported_parameter", param=field)
