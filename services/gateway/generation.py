"""Shared core of the OpenAI-compatible endpoints: request fields -> decoder Generate -> beams.

Beam semantics are transformers' `generate(num_beams=beam_width, num_return_sequences=n)`:
each returned beam is one choice, best first. Without `beam_width`, n > 1 means beam search
with n beams (deterministic), since sampling returns one sequence per request."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.normalization import NORMALIZATION_PB
from widebeam.services.gateway.schemas.completions import BeamFields, unsupported
from widebeam.services.gateway.state import GatewayState
from widebeam.services.gateway.text_codec import TextCodec
from widebeam.services.http.errors import bad_request

DEFAULT_MAX_TOKENS = 16
_EARLY_STOPPING = {
    None: pb.EARLY_STOPPING_UNSPECIFIED,
    False: pb.EARLY_STOPPING_FALSE,
    True: pb.EARLY_STOPPING_TRUE,
    "never": pb.EARLY_STOPPING_NEVER,
}
LogprobsFn = Callable[["Generated", pb.Beam], Any]
FINISH_REASONS = {pb.FINISH_REASON_STOP: "stop", pb.FINISH_REASON_LENGTH: "length"}


@dataclass(frozen=True)
class Generated:
    response: pb.GenerateResponse
    codec: TextCodec | None
    model: str  # the name the response reports: the requested one, or the served model's

    def text(self, beam: pb.Beam) -> str:
        return self.codec.decode(list(beam.output_ids)) if self.codec is not None else ""

    def usage(self) -> dict[str, object]:
        usage = self.response.usage
        return {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            # OpenAI's place for prompt tokens served from a cache.
            "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
        }

    def extensions(self, beam: pb.Beam) -> dict[str, object]:
        """widebeam's per-choice additions to the OpenAI shape, and SGLang's `sglext` (where
        FlashRec's and SGLang's clients read a beam's score: the same value)."""
        extra: dict[str, object] = {
            "sequence_score": beam.score,
            "cum_logprob": beam.cum_logprob,
            "token_ids": list(beam.output_ids),
            "sglext": {"sequence_score": beam.score},
        }
        if self.response.HasField("catalog"):
            extra["item_ids"] = list(beam.item_ids)
        return extra

    def catalog(self) -> dict[str, str] | None:
        if not self.response.HasField("catalog"):
            return None
        return {"name": self.response.catalog.name, "version": self.response.catalog.version}

    def choices(
        self, content: Callable[[pb.Beam], dict[str, object]], logprobs: LogprobsFn | None
    ) -> list[dict[str, object]]:
        """One OpenAI choice per beam, best first; `content` adds the text or message field."""
        return [
            {
                "index": index,
                **content(beam),
                "finish_reason": FINISH_REASONS.get(beam.finish_reason, "length"),
                "logprobs": logprobs(self, beam) if logprobs is not None else None,
                **self.extensions(beam),
            }
            for index, beam in enumerate(self.response.beams)
        ]

    def envelope(
        self, object_name: str, id_prefix: str, model: str, choices: list[dict[str, object]]
    ) -> dict[str, Any]:
        """The OpenAI response around the choices (plus the catalog for constrained beams)."""
        out: dict[str, Any] = {
            "id": f"{id_prefix}-{uuid.uuid4().hex}",
            "object": object_name,
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": self.usage(),
        }
        if (catalog := self.catalog()) is not None:
            out["catalog"] = catalog
        return out


async def require_codec(state: GatewayState, what: str) -> TextCodec:
    codec = await state.codec()
    if codec is None:
        raise bad_request(
            f"{what} needs the model's tokenizer, which this gateway cannot read; send token "
            "ids, or start the gateway with WIDEBEAM_GATEWAY_MODEL_DIR",
            code="tokenizer_unavailable",
        )
    return codec


async def generate(
    state: GatewayState,
    body: BeamFields,
    route: str,
    prompt: list[int],
    max_tokens: int | None,
    logprobs: bool,
    eos_token_ids: list[int] | None = None,
) -> Generated:
    """The decoder's beams for `prompt`. `eos_token_ids`, when given, replace the model's EOS
    ids (SGLang's stop_token_ids, added to them by its route)."""
    unsupported(body)
    model = state.check_model(body.model)
    settings = state.settings
    if not prompt:
        raise bad_request("the prompt is empty: it needs at least one token", param="prompt")
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if max_tokens > settings.max_tokens:
        raise bad_request(
            f"max_tokens must be <= {settings.max_tokens} (the gateway's limit)",
            param="max_tokens",
        )
    if body.n > settings.max_n:
        raise bad_request(f"n must be <= {settings.max_n} (the gateway's limit)", param="n")
    beam = body.beam_width or body.n
    cap, who = state.beam_cap()
    if beam > cap:
        raise bad_request(f"beam_width must be <= {cap} ({who})", param="beam_width")
    if body.n > beam:
        raise bad_request(f"n ({body.n}) must be <= beam_width ({beam})", param="n")
    if body.temperature and beam > 1:
        raise bad_request(
            "temperature > 0 samples one sequence; use it with beam_width 1 and n 1, or leave "
            "it unset for beam search",
            param="temperature",
        )
    constrained = body.constrained
    if constrained is None:
        constrained = state.served_models.constrained_by_default(model)
    catalog = ""
    if constrained:
        catalog = (await state.require_catalog(body.catalog or DEFAULT_CATALOG)).name
    elif body.catalog is not None:
        raise bad_request("catalog is only used with constrained=true", param="catalog")
    request = pb.GenerateRequest(
        input_ids=prompt,
        beam_width=beam,
        n=body.n,
        max_new_tokens=max_tokens,
        early_stopping=_EARLY_STOPPING[body.early_stopping],
        ignore_eos=body.ignore_eos,
        constrained=constrained,
        catalog=catalog,
        return_logprobs=logprobs,
        # "sid" without constrained=true is the decoder's INVALID_ARGUMENT (one rule, one place).
        normalization=NORMALIZATION_PB[body.normalization],
    )
    if eos_token_ids is not None:
        request.custom_eos = True
        request.eos_token_ids.extend(eos_token_ids)
    # proto3 `optional`: only fields the client gave, so the decoder's defaults apply otherwise.
    for name, value in (
        ("min_new_tokens", body.min_tokens),
        ("length_penalty", body.length_penalty),
        ("temperature", body.temperature),
        ("top_p", body.top_p),
        ("top_k", body.top_k),
        ("seed", body.seed),
    ):
        if value is not None:
            setattr(request, name, value)
    state.metrics.beam_width.labels(route).observe(beam)
    response = await state.pool.generate(request, timeout=settings.request_timeout_s)
    return Generated(response, await state.codec(), model)
