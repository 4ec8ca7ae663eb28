"""What the gateway is asked for one sample, and what its answer predicts.

`/v1/recommend` (item histories): the answer's items, best first — distinct catalog items by
construction, so none is invalid or a duplicate. `/v1/chat/completions` (RecIF prompts): each
choice is one beam, best first; at the ``sid`` level it predicts the SID in its text, at the
``item`` level the catalog items of that SID (``item_ids``, in catalog order) — a beam's items
extend the ranked list as `widebeam demo build`'s evaluation does. A beam is **invalid** when
its text holds no SID, or when the gateway reports its catalog items (constrained requests)
and there are none; it is a **duplicate** when an earlier beam of the answer named its SID.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from widebeam.eval.samples import EvalSample, Level, Route
from widebeam.eval.sid_text import generated_sid


@dataclass(frozen=True)
class RequestSettings:
    n: int
    beam_width: int
    catalog: str | None = None  # None: the gateway's default catalog
    exclude_history: bool = False  # the held-out item may be one the user saw before
    constrained: bool = True  # chat route only; /v1/recommend always is
    max_tokens: int = 5  # chat route: <|sid_begin|>, 3 codes, <|sid_end|>
    model: str | None = None  # chat route: the served model's id (GET /v1/models)
    chat_template_kwargs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Prediction:
    ranked: tuple[str, ...]  # predicted ids at the run's level, best first
    returned: int  # beams (chat) or items (recommend) in the answer
    invalid: int  # of them naming no catalog item / holding no SID
    duplicates: int  # of them repeating an earlier one's SID


def request_body(sample: EvalSample, settings: RequestSettings) -> dict[str, Any]:
    if sample.route == Route.RECOMMEND:
        body: dict[str, Any] = {
            "history": list(sample.history or ()),
            "n": settings.n,
            "beam_width": settings.beam_width,
            "exclude_history": settings.exclude_history,
        }
        if settings.catalog is not None:
            body["catalog"] = settings.catalog
        return body
    body = {
        "model": settings.model,
        "messages": list(sample.messages or ()),
        "n": settings.n,
        "beam_width": settings.beam_width,
        "max_tokens": settings.max_tokens,
    }
    if settings.constrained:
        body["constrained"] = True
        if settings.catalog is not None:
            body["catalog"] = settings.catalog
    if settings.chat_template_kwargs is not None:
        body["chat_template_kwargs"] = settings.chat_template_kwargs
    return body


def prediction(route: Route, level: Level, answer: dict[str, Any]) -> Prediction:
    if route == Route.RECOMMEND:
        items = tuple(str(item["item_id"]) for item in answer["items"])
        return Prediction(items, len(items), 0, len(items) - len(set(items)))
    ranked: list[str] = []
    seen_sids: set[str] = set()
    invalid = duplicates = 0
    choices = sorted(answer["choices"], key=lambda c: int(c.get("index", 0)))
    for choice in choices:
        sid = generated_sid(str((choice.get("message") or {}).get("content") or ""))
        items = choice.get("item_ids")
        if sid is None or (items is not None and not items):
            invalid += 1
            continue
        duplicates += sid in seen_sids
        seen_sids.add(sid)
        if level == Level.SID:
            ranked.append(sid)
        else:
            ranked.extend(str(i) for i in items or ())
    return Prediction(tuple(ranked), len(choices), invalid, duplicates)
