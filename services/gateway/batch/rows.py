"""One batch row: a recommend request through the decoder pool -> its `/v1/recommend` body.

Mirrors the gateway's `recommender.recommend` (which needs the live app's state): the same
response shape, usage summed over the calls, and the same widening rule — a call whose beams
ran out of non-excluded items (`exhausted`) with a full beam is repeated with the beam doubled,
capped by the limits, the decoders' widest beam and the catalog's number of SIDs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.normalization import NORMALIZATION_PB
from widebeam.services.http.errors import ApiError

# GetInfo, cached or (fresh=True) asked anew.
InfoSource = Callable[[bool], Awaitable[pb.GetInfoResponse]]


async def _catalog(info_of: InfoSource, name: str) -> pb.CatalogInfo:
    """The catalog's info; 404 when no decoder serves it, after one fresh GetInfo."""
    for fresh in (False, True):
        info = await info_of(fresh)
        for catalog in info.catalogs:
            if catalog.name == name:
                return catalog
    loaded = ", ".join(sorted(c.name for c in info.catalogs)) or "none"
    message = f"unknown catalog {name!r}; loaded: {loaded}"
    raise ApiError(404, message, "catalog_not_found", param="catalog")


async def recommend_row(
    pool: DecoderPool,
    row: dict[str, Any],
    *,
    info_of: InfoSource,
    max_beam_width: int,
    budget_s: float,
) -> dict[str, Any]:
    """The row's result; raises `ApiError` when the decoders refuse it or time runs out."""
    started = time.monotonic()
    n, beam = int(row["n"]), int(row["beam_width"])
    catalog = await _catalog(info_of, row["catalog"])
    info = await info_of(False)
    cap = max_beam_width
    if info.limits.max_beam_width:
        cap = min(cap, info.limits.max_beam_width)
    if catalog.num_sids > 0:  # a beam wider than the catalog's SID count finds nothing more
        cap = min(cap, max(catalog.num_sids, beam))
    exclude = list(row.get("exclude", []))
    if row.get("exclude_history", True):
        exclude += row["history"]
    exclude = list(dict.fromkeys(exclude))
    prompt_tokens = completion_tokens = 0
    while True:
        remaining = budget_s - (time.monotonic() - started)
        if remaining <= 0:
            message = "the row did not finish within its time budget"
            raise ApiError(503, message, "deadline_exceeded")
        request = pb.RecommendRequest(
            request_id=uuid.uuid4().hex,
            history_item_ids=row["history"],
            n=n,
            beam_width=beam,
            catalog=row["catalog"],
            exclude_item_ids=exclude,
            skip_unknown_items=bool(row.get("skip_unknown_items", False)),
            # Rows stored before the field existed have none: the old behaviour, "vocab".
            normalization=NORMALIZATION_PB[row.get("normalization", "vocab")],
        )
        response = await pool.recommend(request, timeout=remaining)
        prompt_tokens += response.usage.prompt_tokens
        completion_tokens += response.usage.completion_tokens
        more_may_exist = response.beams_returned >= beam and beam < cap
        if not response.exhausted or not more_may_exist:
            break
        beam = min(2 * beam, cap)
    result: dict[str, Any] = {} if row.get("user_id") is None else {"user_id": row["user_id"]}
    return result | {
        "items": [
            {"item_id": item.item_id, "score": item.score, "sid": list(item.sid.codes)}
            for item in response.items
        ],
        "catalog": {"name": response.catalog.name, "version": response.catalog.version},
        "model": info.model_name,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "latency_ms": round((time.monotonic() - started) * 1000, 3),
        "beam_width": beam,
        "exhausted": response.exhausted,
        "skipped_history_item_ids": list(response.skipped_history_item_ids),
    }


def error_result(error: ApiError, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{"error": {...}}` as the gateway would answer it, with the HTTP status it would use."""
    body = error.body()["error"] | {"status": error.status}
    prefix = {} if not row or row.get("user_id") is None else {"user_id": row["user_id"]}
    return prefix | {"error": body}
