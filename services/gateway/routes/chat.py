"""OpenAI-compatible `POST /v1/chat/completions`: messages through the model's chat template
(see `chat_template`; `chat_template_kwargs` are its variables), then the same beam generation
as `/v1/completions`; `stream: true` answers as Server-Sent Events (see `streaming`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.generation import Generated, generate, require_codec
from widebeam.services.gateway.prompt_tokens import encode_chat
from widebeam.services.gateway.routes import openai_route
from widebeam.services.gateway.schemas.completions import ChatCompletionRequest
from widebeam.services.gateway.state import State

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
    router = openai_route.new_router()

    @openai_route.post(router, ROUTE, "Chat completion; beams as choices (OpenAI)")
    async def chat_completions(body: ChatCompletionRequest, state: State) -> openai_route.Answer:
        max_tokens = body.new_tokens()
        codec = await require_codec(state, "a chat request")
        messages = [m.as_template_input() for m in body.messages]
        ids = await encode_chat(state, codec, messages, body.chat_template_kwargs)
        want_logprobs = bool(body.logprobs)
        generated = await generate(state, body, ROUTE, ids, max_tokens, want_logprobs)
        # A stream's one chunk carries each whole message as the choice's delta.
        part = "delta" if body.stream else "message"
        choices = generated.choices(
            lambda beam: {part: {"role": "assistant", "content": generated.text(beam)}},
            _logprobs if want_logprobs else None,
        )
        response = generated.envelope("chat.completion", "chatcmpl", generated.model, choices)
        return openai_route.answer(response, body, "chat.completion.chunk")

    return router
