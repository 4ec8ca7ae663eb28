"""Is an answer right for its request? `problem(call, response)` is None when it is, else a short
description (counted and sampled in the report).

200: the body has the documented shape and matches what was asked (counts, distinct items,
best first, catalog items only). 429 / 503: an error body and a `Retry-After` of whole seconds.
Any other status is wrong: every request the load generator sends is valid."""

from __future__ import annotations

import json
import math
from collections.abc import Set as AbstractSet
from typing import Any

from widebeam.loadgen.http_client import Response
from widebeam.loadgen.traffic import CHAT, COMPLETIONS, RECOMMEND, Call

SHED_STATUSES = frozenset({429, 503})


def problem(call: Call, response: Response, items: AbstractSet[str] = frozenset()) -> str | None:
    try:
        body = json.loads(response.body)
    except ValueError:
        return f"{response.status}: body is not JSON"
    if response.status in SHED_STATUSES:
        return _shed_problem(response, body)
    if response.status != 200:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
        return f"unexpected {response.status}: {str(message)[:200]}"
    if not isinstance(body, dict):
        return "200: body is not an object"
    try:
        if call.path == RECOMMEND:
            return _recommend(call.request, body, items)
        if call.path in (COMPLETIONS, CHAT):
            return _choices(call, body, items)
    except (KeyError, TypeError, ValueError) as exc:
        return f"200: malformed body ({type(exc).__name__}: {exc})"
    return f"no check for {call.path}"


def _shed_problem(response: Response, body: Any) -> str | None:
    retry_after = response.headers.get("retry-after", "")
    if not retry_after.isdigit() or int(retry_after) < 1:
        return f"{response.status} without a valid Retry-After ({retry_after!r})"
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return f"{response.status}: not an error body"
    return None


def _recommend(
    request: dict[str, Any], body: dict[str, Any], items: AbstractSet[str]
) -> str | None:
    got = body["items"]
    n = request["n"]
    if len(got) > n or (len(got) < n and not body["exhausted"]):
        return f"recommend: {len(got)} items for n={n} (exhausted={body['exhausted']})"
    ids = [item["item_id"] for item in got]
    if len(set(ids)) != len(ids):
        return "recommend: duplicate items"
    if set(ids) & set(request["history"]):
        return "recommend: returned an item of the history"
    if items and not items.issuperset(ids):
        return f"recommend: items not in the catalog: {sorted(set(ids) - items)[:5]}"
    scores = [float(item["score"]) for item in got]
    if any(not math.isfinite(s) for s in scores) or scores != sorted(scores, reverse=True):
        return "recommend: scores not finite and best first"
    if any(not item["sid"] or not all(isinstance(c, int) for c in item["sid"]) for item in got):
        return "recommend: an item without a SID"
    if body["beam_width"] < request["beam_width"] or not body["catalog"]["version"]:
        return "recommend: beam width or catalog version missing"
    return _usage(body)


def _choices(call: Call, body: dict[str, Any], items: AbstractSet[str]) -> str | None:
    request = call.request
    chat = call.path == CHAT
    if body["object"] != ("chat.completion" if chat else "text_completion"):
        return f"{call.kind}: object {body['object']!r}"
    choices = body["choices"]
    if [c["index"] for c in choices] != list(range(request.get("n", 1))):
        return f"{call.kind}: {len(choices)} choices for n={request.get('n', 1)}"
    scores = [float(c["sequence_score"]) for c in choices]
    if scores != sorted(scores, reverse=True):
        return f"{call.kind}: choices not best first"
    for c in choices:
        text = c["message"]["content"] if chat else c["text"]
        if not isinstance(text, str) or c["finish_reason"] not in ("stop", "length"):
            return f"{call.kind}: choice without text or finish_reason"
        if not 1 <= len(c["token_ids"]) <= request["max_tokens"]:
            return (
                f"{call.kind}: {len(c['token_ids'])} tokens for max_tokens={request['max_tokens']}"
            )
        if request.get("constrained"):
            found = c["item_ids"]
            if not found or (items and not items.issuperset(found)):
                return f"{call.kind}: constrained choice without catalog items ({found[:3]})"
    return _usage(body)


def _usage(body: dict[str, Any]) -> str | None:
    usage = body["usage"]
    if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
        return "usage does not add up"
    return None
