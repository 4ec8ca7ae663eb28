"""OpenAI-compatible `POST /v1/chat/completions`: messages through the model's chat template
(see `chat_template`), then the same beam generation as `/v1/completions`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.generation import (
    Generated,
    generate,
    require_codec,
)
from widebeam.services.gateway.prompt_tokens import encode_chat
from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.schemas.completions import ChatCompletionRequest
from widebeam.services.gateway.state import State
from widebeam.services.http.errors import bad_request
from widebeam.services.http.strict_json_route import StrictJsonRoute

ROUTE = "/v1/chat/completions"


def _logprobs(generated: Generated, beam: pb.Beam) -> dict[str, Any]:
    ids = list(beam.output_ids)
    codec = generated.codec
    tokens = codec.tokens(ids) if codec is not None else [str(i) for i in ids]
    return {
        "content": [
            {"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": []}
            for tok, lp in zip(tokens, beam.logprobs, strict=False)
        ]
    }


def create_router() -> APIRouter:
    router = APIRouter(tags=["openai"], route_class=StrictJsonRoute)

    @router.post(
        ROUTE, responses=ERROR_RESPONSES, summary="Chat completion; beams as choices (OpenAI)"
    )
    async def chat_completions(body: ChatCompletionRequest, state: State) -> dict[str, Any]:
        if body.max_tokens is not None and body.max_completion_tokens is not None:
            raise bad_request(
                "give max_tokens or max_completion_tokens, not both", param="max_tokens"
            )
        codec = await require_codec(state, "a chat request")
        ids = await encode_chat(state, codec, [m.as_template_input() for m in body.messages])
        max_tokens = body.max_completion_tokens or body.max_tokens
        want_logprobs = bool(body.logprobs)
        generated = await generate(state, body, ROUTE, ids, max_tokens, want_logprobs)
        choices = generated.choices(
            lambda beam: {"message": {"role": "assistant", "content": generated.text(beam)}},
            _logprobs if want_logprobs else None,
        )
        return generated.envelope("chat.completion", "chatcmpl", body.model, choices)

    return router
