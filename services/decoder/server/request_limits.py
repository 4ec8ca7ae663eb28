"""What one request may ask for, checked by the decoder itself whoever calls it (the gateway
holds its own, usually lower, limits; a direct gRPC call meets these).

Counts are checked on the wire message before it is parsed (a prompt of millions of ids is
refused before anything walks it), beam width and n once their defaults are resolved, a
Recommend prompt once the history is mapped to tokens. Each refusal is a `RequestError`
(INVALID_ARGUMENT) naming the field and the setting. The engine's own checks (`validation.py`:
rows, context length, KV slots, vocabulary) still follow; these are the service's policy."""

from __future__ import annotations

from dataclasses import dataclass

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.spec import RequestError
from widebeam.services.decoder.requests.validation import EngineLimits
from widebeam.services.decoder.server.settings import DecoderSettings


def _at_most(field: str, count: int, limit: int, setting: str) -> None:
    if count > limit:
        raise RequestError(f"{field} has {count} entries; this decoder's {setting} is {limit}")


@dataclass(frozen=True)
class RequestLimits:
    max_beam_width: int
    max_n: int
    max_prompt_tokens: int
    max_history_items: int
    max_exclude_ids: int
    max_eos_token_ids: int  # the vocabulary size: a longer list only repeats ids
    # Who sets max_beam_width, as the error says it: the setting, or the engine's row count.
    beam_limit_name: str = "decoder's max_beam_width"

    @classmethod
    def resolve(cls, settings: DecoderSettings, engine: EngineLimits) -> RequestLimits:
        """The settings' limits, their defaults taken from the loaded engine's."""
        beam = settings.max_beam_width or engine.max_rows
        named = "decoder's max_beam_width" if settings.max_beam_width else "engine's max_rows"
        prompt = settings.max_prompt_tokens or engine.max_model_len
        return cls(
            max_beam_width=beam,
            max_n=settings.max_n or beam,
            max_prompt_tokens=prompt,
            max_history_items=settings.max_history_items or prompt,
            max_exclude_ids=settings.max_exclude_ids,
            max_eos_token_ids=engine.vocab_size,
            beam_limit_name=named,
        )

    def check_generate(self, msg: pb.GenerateRequest) -> None:
        _at_most("input_ids", len(msg.input_ids), self.max_prompt_tokens, "max_prompt_tokens")
        _at_most("eos_token_ids", len(msg.eos_token_ids), self.max_eos_token_ids, "vocabulary size")

    def check_recommend(self, msg: pb.RecommendRequest) -> None:
        for field, count in (
            ("history_item_ids", len(msg.history_item_ids)),
            ("history_sids", len(msg.history_sids)),
        ):
            _at_most(field, count, self.max_history_items, "max_history_items")
        _at_most(
            "exclude_item_ids", len(msg.exclude_item_ids), self.max_exclude_ids, "max_exclude_ids"
        )

    def check_beam(self, beam_width: int, n: int) -> None:
        """`beam_width` and `n` as resolved (a default counts like a value given); n first, as a
        default beam width follows it."""
        if n > self.max_n:
            raise RequestError(f"n {n} exceeds this decoder's max_n {self.max_n}")
        if beam_width > self.max_beam_width:
            raise RequestError(
                f"beam_width {beam_width} exceeds this {self.beam_limit_name} {self.max_beam_width}"
            )

    def check_prompt(self, tokens: int, what: str) -> None:
        if tokens > self.max_prompt_tokens:
            raise RequestError(
                f"{what} is {tokens} tokens; this decoder's max_prompt_tokens is "
                f"{self.max_prompt_tokens}"
            )
