"""SGLang's native `POST /generate`, beam search included, through the OpenAI routes' generation
path (`generation.generate`), so a prompt's beams and scores are those of `/v1/completions`.

The answer has SGLang's shape: per prompt `{"text", "output_ids", "meta_info"}` of the best
beam, and, for beam search, `meta_info.beam_results[]` with every returned beam best first,
each `{"text", "output_ids", "meta_info": {"finish_reason", "sequence_score"}}`. A batch (a list
of prompts) is answered with a list, in prompt order. The field-by-field mapping is in
docs/api.md, "Coming from FlashRec / SGLang"."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.generation import Generated, generate, require_codec
from widebeam.services.gateway.prompt_tokens import encode_text
from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.schemas.completions import BeamFields
from widebeam.services.gateway.schemas.generate import (
    BATCH_IDS,
    BATCH_TEXT,
    DEFAULT_MAX_NEW_TOKENS,
    MAX_BATCH_PROMPTS,
    PROMPT_IDS,
    PROMPT_TEXT,
    SAMPLING_PARAMS,
    GenerateRequest,
    SamplingParams,
    read,
    unsupported,
    unsupported_request,
)
from widebeam.services.gateway.state import GatewayState, State
from widebeam.services.http.errors import ApiError, bad_request
from widebeam.services.http.plain_json import plain_json
from widebeam.services.http.strict_json_route import StrictJsonRoute

ROUTE = "/generate"
# generate()'s names for the fields SGLang keeps in sampling_params (the same words but two).
_SAMPLING_FIELDS = {
    "n": "n",
    "beam_width": "beam_width",
    "temperature": "temperature",
    "catalog": "catalog",
    "constrained": "constrained",
    "normalization": "normalization",
    "max_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
}


@dataclass(frozen=True)
class PromptInput:
    """One prompt of a /generate request: its ids, its sampling params and where they came
    from (for error messages), its request id."""

    ids: list[int]
    params: SamplingParams
    params_at: str  # "sampling_params" or "sampling_params[i]"
    prompt_at: str  # "text", "text[i]", "input_ids" or "input_ids[i]"
    rid: str


def is_batch(body: GenerateRequest) -> bool:
    """A list of prompts (answered with a list), not one prompt."""
    ids = body.input_ids
    return isinstance(body.text, list) or (bool(ids) and isinstance(ids[0], list))


def _batch_size(prompts: list[Any], field: str) -> None:
    if not prompts or len(prompts) > MAX_BATCH_PROMPTS:
        raise bad_request(
            f"{field} has {len(prompts)} prompts; a batch has 1..{MAX_BATCH_PROMPTS}",
            param=field,
        )


async def prompt_inputs(state: GatewayState, body: GenerateRequest) -> list[PromptInput]:
    """The request's prompts, each with its sampling params and id; 400 naming the field."""
    if (body.text is None) == (body.input_ids is None):
        raise bad_request(
            "give the prompt as text or as input_ids (one of them)",
            param="text" if body.text is not None else "input_ids",
        )
    batch = is_batch(body)
    field = "text" if body.text is not None else "input_ids"
    if body.text is not None:
        if batch:
            _batch_size(body.text, "text")
            texts = read(BATCH_TEXT, body.text, "text")
        else:
            texts = [read(PROMPT_TEXT, body.text, "text")]
        codec = await require_codec(state, "a text prompt")
        places = [f"text[{i}]" if batch else "text" for i in range(len(texts))]
        prompts = list(
            await asyncio.gather(
                *(encode_text(state, codec, t, at) for t, at in zip(texts, places, strict=True))
            )
        )
    elif batch:
        assert body.input_ids is not None
        _batch_size(body.input_ids, "input_ids")
        prompts = read(BATCH_IDS, body.input_ids, "input_ids")
    else:
        prompts = [read(PROMPT_IDS, body.input_ids, "input_ids")]
    count = len(prompts)
    params = _sampling_params(body.sampling_params, count)
    rids = _request_ids(body.rid, count, batch)
    return [
        PromptInput(
            ids,
            sampling,
            where,
            f"{field}[{i}]" if batch else field,
            rid,
        )
        for i, (ids, (sampling, where), rid) in enumerate(zip(prompts, params, rids, strict=True))
    ]


def _sampling_params(raw: object, count: int) -> list[tuple[SamplingParams, str]]:
    if raw is None or isinstance(raw, dict):
        one = read(SAMPLING_PARAMS, raw or {}, "sampling_params")
        return [(one, "sampling_params")] * count
    assert isinstance(raw, list)
    if len(raw) != count:
        raise bad_request(
            f"sampling_params has {len(raw)} entries for {count} prompts; give one object for "
            "all of them or one per prompt",
            param="sampling_params",
        )
    return [
        (read(SAMPLING_PARAMS, entry, f"sampling_params[{i}]"), f"sampling_params[{i}]")
        for i, entry in enumerate(raw)
    ]


def _request_ids(rid: str | list[str] | None, count: int, batch: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(count)]
    if isinstance(rid, str):
        if batch:
            raise bad_request("a batch needs a list of rid, one per prompt", param="rid")
        return [rid]
    if len(rid) != count:
        raise bad_request(f"rid has {len(rid)} entries for {count} prompts", param="rid")
    return rid


def _beam_fields(params: SamplingParams) -> BeamFields:
    """The OpenAI fields generate() reads, from SGLang's sampling params. Only fields the
    client gave are set, so the gateway's defaults for the others apply as for /v1 requests
    (`constrained` never given: the served model's `default_constrained`)."""
    given = params.model_fields_set
    n = params.n if params.n is not None else (params.beam_width or 1)
    fields: dict[str, Any] = {"n": n}  # no model: the served model's (its default-constrained)
    renamed = {"min_new_tokens": "min_tokens", "sampling_seed": "seed"}
    for name in (
        "beam_width",
        "temperature",
        "top_p",
        "sampling_seed",
        "min_new_tokens",
        "ignore_eos",
        "constrained",
        "catalog",
        "length_penalty",
        "early_stopping",
        "normalization",
    ):
        if name in given:
            fields[renamed.get(name, name)] = getattr(params, name)
    if params.top_k not in (None, -1):
        fields["top_k"] = params.top_k
    return BeamFields.model_validate(fields)


def _eos_token_ids(state: GatewayState, params: SamplingParams) -> list[int] | None:
    """SGLang's stop_token_ids end a sequence besides the model's EOS: both lists, or None
    (the decoder's default EOS) when the request gives none."""
    if not params.stop_token_ids:
        return None
    info = state.pool.latest_info()
    default = list(info.default_eos_token_ids) if info is not None else []
    return list(dict.fromkeys([*default, *params.stop_token_ids]))


def _finish_reason(beam: pb.Beam) -> dict[str, object]:
    """SGLang's finish reason: the stop token that ended the beam, or the length it reached."""
    if beam.finish_reason == pb.FINISH_REASON_STOP and beam.output_ids:
        return {"type": "stop", "matched": beam.output_ids[-1]}
    return {"type": "length", "length": len(beam.output_ids)}


def _text(generated: Generated, beam: pb.Beam, params: SamplingParams) -> str:
    codec = generated.codec
    if codec is None:
        return ""
    ids = list(beam.output_ids)
    return str(codec.tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens))


def _beam_result(generated: Generated, beam: pb.Beam, params: SamplingParams) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "finish_reason": _finish_reason(beam),
        "sequence_score": beam.score,
        "cum_logprob": beam.cum_logprob,
    }
    if generated.response.HasField("catalog"):
        meta["item_ids"] = list(beam.item_ids)
    return {
        "text": _text(generated, beam, params),
        "output_ids": list(beam.output_ids),
        "meta_info": meta,
    }


def _answer(
    generated: Generated, prompt: PromptInput, beam_search: bool, started: float
) -> dict[str, Any]:
    """One prompt's SGLang response: the best beam at the top, all of them in beam_results."""
    results = [_beam_result(generated, b, prompt.params) for b in generated.response.beams]
    best = results[0] if results else {"text": "", "output_ids": [], "meta_info": {}}
    usage = generated.response.usage
    meta: dict[str, Any] = {
        "id": prompt.rid,
        **best["meta_info"],
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cached_tokens": usage.cached_prompt_tokens,
        "e2e_latency": round(time.perf_counter() - started, 6),
    }
    if beam_search:
        meta["beam_results"] = results
    if (catalog := generated.catalog()) is not None:
        meta["catalog"] = catalog
    return {"text": best["text"], "output_ids": best["output_ids"], "meta_info": meta}


def _named_for_sglang(error: ApiError, prompt: PromptInput) -> ApiError:
    """generate()'s 400s name OpenAI's fields; here they are SGLang's, under sampling_params."""
    if error.status != 400 or error.param is None:
        return error
    if error.param == "prompt":
        error.param = prompt.prompt_at
    elif error.param in _SAMPLING_FIELDS:
        error.param = f"{prompt.params_at}.{_SAMPLING_FIELDS[error.param]}"
    return error


async def _generate_one(state: GatewayState, prompt: PromptInput) -> dict[str, Any]:
    started = time.perf_counter()
    params = prompt.params
    unsupported(params, prompt.params_at)
    max_new_tokens = params.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    if max_new_tokens > state.settings.max_tokens:
        raise bad_request(
            f"max_new_tokens must be <= {state.settings.max_tokens} (the gateway's limit)",
            param=f"{prompt.params_at}.max_new_tokens",
        )
    fields = _beam_fields(params)
    beam_search = bool(params.use_beam_search) or (fields.beam_width or fields.n) > 1
    try:
        generated = await generate(
            state, fields, ROUTE, prompt.ids, max_new_tokens, False,
            eos_token_ids=_eos_token_ids(state, params),
        )  # fmt: skip
    except ApiError as error:
        raise _named_for_sglang(error, prompt) from None
    return _answer(generated, prompt, beam_search, started)


def create_router() -> APIRouter:
    router = APIRouter(tags=["sglang"], route_class=StrictJsonRoute)

    @router.post(
        ROUTE,
        responses=ERROR_RESPONSES,
        summary="SGLang's native generate API; beam search with sampling_params.n / beam_width",
    )
    async def generate_route(body: GenerateRequest, state: State) -> Any:
        unsupported_request(body)
        prompts = await prompt_inputs(state, body)
        # Every prompt runs to its end before the first error (if any) is the answer.
        outcomes = await asyncio.gather(
            *(_generate_one(state, p) for p in prompts), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        answers = [o for o in outcomes if not isinstance(o, BaseException)]
        return plain_json(answers if is_batch(body) else answers[0])

    return router
