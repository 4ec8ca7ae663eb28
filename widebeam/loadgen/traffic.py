"""The requests a load run sends: `/v1/recommend` over catalog items, and (mixed traffic)
OpenAI completions and chat, beam search and sampling, interleaved in a fixed cycle.

Every request is valid by construction, so each must come back 200 (or 429 / 503 when the
stack sheds load); the body of each 200 is checked against the request (`checks`)."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

RECOMMEND = "/v1/recommend"
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"

# OneRec-style SID text (the layout the tiny test models and OneRec share).
DEFAULT_PROMPTS = (
    "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>",
    "<|sid_begin|><s_a_4><s_b_0><s_c_7><|sid_end|><|sid_begin|><s_a_9><s_b_5><s_c_1><|sid_end|>",
)


@dataclass(frozen=True)
class Call:
    """One request: what it is (`kind`, for the report), where it goes and what it asked."""

    kind: str
    path: str
    request: dict[str, Any]
    body: bytes = field(repr=False, default=b"")

    @staticmethod
    def of(kind: str, path: str, request: dict[str, Any]) -> Call:
        return Call(kind, path, request, json.dumps(request).encode())


@dataclass(frozen=True)
class TrafficSpec:
    items: Sequence[str]  # catalog item ids the histories are drawn from
    beam_widths: Sequence[int] = (8,)
    mixed: bool = False  # add completions and chat to the cycle
    model: str | None = None  # the served model (completions, chat); None: GET /v1/models
    prompts: Sequence[str] = DEFAULT_PROMPTS
    history_len: tuple[int, int] = (1, 8)
    seed: int = 0


def recommend_n(beam: int) -> int:
    """Items asked for at a beam width: all beams up to 4, then a growing share."""
    return beam if beam <= 4 else max(4, min(32, beam // 8))


def recommend_call(rng: random.Random, spec: TrafficSpec, beam: int) -> Call:
    if not spec.items:
        raise ValueError("recommend traffic needs catalog item ids (--items / --items-file)")
    length = rng.randint(*spec.history_len)
    history = rng.sample(list(spec.items), min(length, len(spec.items)))
    body = {"history": history, "n": recommend_n(beam), "beam_width": beam}
    return Call.of(f"recommend/b{beam}", RECOMMEND, body)


def openai_calls(spec: TrafficSpec, prompt: str, beam: int) -> list[Call]:
    """Completions (constrained beam, unconstrained beam, sampled) and chat (greedy, beam)."""
    model = spec.model
    if model is None:
        raise ValueError("mixed traffic needs the served model's name")
    beam_n = max(1, min(beam, 4))
    chat_messages = [{"role": "user", "content": prompt}]
    return [
        Call.of("completions/constrained", COMPLETIONS, {
            "model": model, "prompt": prompt, "n": beam_n, "max_tokens": 5,
            "beam_width": beam, "constrained": True,
        }),
        Call.of("completions/beam", COMPLETIONS, {
            "model": model, "prompt": prompt, "n": beam_n, "max_tokens": 4, "beam_width": beam,
        }),
        Call.of("completions/sampled", COMPLETIONS, {
            "model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0.8, "top_p": 0.9,
            "seed": beam,
        }),
        Call.of("chat/greedy", CHAT, {
            "model": model, "messages": chat_messages, "max_tokens": 3,
        }),
        Call.of("chat/beam", CHAT, {
            "model": model, "messages": chat_messages, "max_tokens": 3, "n": beam_n,
            "beam_width": beam,
        }),
    ]  # fmt: skip


def build_cycle(spec: TrafficSpec, length: int = 240) -> list[Call]:
    """A fixed sequence of calls, replayed in order: recommend at each beam width in turn, and
    in mixed traffic one OpenAI call after every recommend."""
    rng = random.Random(spec.seed)
    beams = itertools.cycle(spec.beam_widths)
    extra: Iterator[Call] = iter(())
    if spec.mixed:
        pool = [
            call
            for i, beam in enumerate(spec.beam_widths)
            for call in openai_calls(spec, spec.prompts[i % len(spec.prompts)], beam)
        ]
        extra = itertools.cycle(pool)
    cycle: list[Call] = []
    while len(cycle) < length:
        cycle.append(recommend_call(rng, spec, next(beams)))
        if spec.mixed:
            cycle.append(next(extra))
    return cycle
