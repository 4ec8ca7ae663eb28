"""Text prompts and chat messages -> token ids, without holding up the event loop.

Tokenizing takes about a second per megabyte of text, so it runs on a worker thread (the
codec's encoding releases the GIL there), and first a prompt is held to a bound on its length
in characters: the decoders' context (`max_model_len` tokens) times the gateway's
`max_prompt_chars_per_token`. A longer prompt could not fit the context with any reasonable
tokenization, so it is refused (400) before any tokenizing work; the exact token count is the
decoder's check, after tokenizing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from widebeam.services.gateway.state import GatewayState
from widebeam.services.gateway.text_codec import TextCodec
from widebeam.services.http.errors import bad_request


def check_prompt_chars(state: GatewayState, chars: int, param: str) -> None:
    """400 naming `param` when `chars` characters are over the bound (none while no decoder
    has reported its context length)."""
    info = state.pool.latest_info()
    context = info.limits.max_model_len if info is not None else 0
    if context <= 0:
        return
    per_token = state.settings.max_prompt_chars_per_token
    limit = context * per_token
    if chars > limit:
        raise bad_request(
            f"the prompt has {chars} characters; at most {limit} are accepted (the model's "
            f"context of {context} tokens x {per_token} characters per token)",
            code="prompt_too_long",
            param=param,
        )


async def encode_text(state: GatewayState, codec: TextCodec, text: str, param: str) -> list[int]:
    check_prompt_chars(state, len(text), param)
    return await asyncio.to_thread(codec.encode, text)


async def encode_chat(
    state: GatewayState,
    codec: TextCodec,
    messages: list[dict[str, str]],
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """The chat template's prompt (`template_kwargs`: the template's extra variables); the
    bound counts the messages' content (the template adds a few characters per message)."""
    check_prompt_chars(state, sum(len(m["content"]) for m in messages), "messages")
    return await asyncio.to_thread(codec.chat_prompt, messages, template_kwargs)
