"""OpenAI-compatible `POST /v1/completions`: one choice per returned beam, best first;
`stream: true` answers as Server-Sent Events (see `streaming`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.generation import Generated, generate, require_codec
from widebeam.services.gateway.prompt_tokens import encode_text
from widebeam.services.gateway.routes import openai_route
from widebeam.services.gateway.schemas.completions import CompletionRequest
from widebeam.services.gateway.state import GatewayState, State
from widebeam.services.http.errors import bad_request

ROUTE = "/v1/completions"


async def prompt_ids(state: GatewayState, prompt: object) -> list[int]:
    """`prompt` as OpenAI allows it (text, token ids, or a list of one of those) -> ids."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) != 1:
            raise bad_request(
                f"one prompt per request, got {len(prompt)}; send them as separate requests",
                param="prompt",
            )
        prompt = prompt[0]
    if isinstance(prompt, str):
        codec = await require_codec(state, "a text prompt")
        return await encode_text(state, codec, prompt, "prompt")
    assert isinstance(prompt, list)
    return [int(token) for token in prompt]


def _logprobs(generated: Generated, beam: pb.Beam) -> dict[str, Any]:
    codec, ids = generated.codec, list(beam.output_ids)
    pieces = [codec.decode([i]) for i in ids] if codec is not None else [""] * len(ids)
    offsets, position = [], 0
    for piece in pieces:
        offsets.append(position)
        position += len(piece)
    return {
        "tokens": codec.tokens(ids) if codec is not None else [str(i) for i in ids],
        "token_logprobs": list(beam.logprobs),
        "top_logprobs": None,
        "text_offset": offsets,
    }


def create_router() -> APIRouter:
    router = openai_route.new_router()

    @openai_route.post(router, ROUTE, "Text completion; beams as choices (OpenAI)")
    async def completions(body: CompletionRequest, state: State) -> openai_route.Answer:
        ids = await prompt_ids(state, body.prompt)
        want_logprobs = body.logprobs is not None
        generated = await generate(state, body, ROUTE, ids, body.max_tokens, want_logprobs)
        choices = generated.choices(
            lambda beam: {"text": generated.text(beam)},
            _logprobs if want_logprobs else None,
        )
        response = generated.envelope("text_completion", "cmpl", generated.model, choices)
        # OpenAI names streamed completion chunks "text_completion" too.
        return openai_route.answer(response, body, "text_completion")

    return router
