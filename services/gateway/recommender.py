"""`/v1/recommend`: limits, then decoder Recommend calls, widening the beam when exclusions
starve it.

Widening rule: the decoder reports `exhausted` when its beams held fewer than n distinct
non-excluded items. If that call returned a full beam (`beams_returned == beam_width`), more SIDs
may exist, so the call is repeated with the beam doubled, capped at the widest allowed beam
(min of the gateway's and the decoders' limits) and at the catalog's number of SIDs. It stops
when n items are found, when the beam was not full (the catalog has no more SIDs), or at the
cap; then `exhausted=true` tells the client there really are no more."""

from __future__ import annotations

import time

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.normalization import NORMALIZATION_PB
from widebeam.services.gateway.schemas.recommend import RecommendRequest
from widebeam.services.gateway.state import GatewayState
from widebeam.services.http.errors import bad_request, retry_later

ROUTE = "/v1/recommend"


def check_limits(state: GatewayState, body: RecommendRequest) -> int:
    """Validate against the configured limits; returns the starting beam width."""
    settings = state.settings
    cap, who = state.beam_cap()
    if body.n > settings.max_n:
        raise bad_request(f"n must be <= {settings.max_n} (the gateway's limit)", param="n")
    if body.beam_width is not None and body.beam_width > cap:
        raise bad_request(f"beam_width must be <= {cap} ({who})", param="beam_width")
    beam = body.beam_width or min(max(body.n, settings.default_beam_width), cap)
    if body.n > beam:
        raise bad_request(f"n ({body.n}) must be <= beam_width ({beam})", param="n")
    if len(body.history) > settings.max_history:
        raise bad_request(
            f"history has {len(body.history)} items; the limit is {settings.max_history}",
            param="history",
        )
    if not body.history and body.fallback == "none":
        raise bad_request(
            "history is empty; give at least one item id, or set fallback='prior' to get the "
            "model's unconditional recommendations",
            param="history",
        )
    return beam


async def recommend(state: GatewayState, body: RecommendRequest) -> dict[str, object]:
    started = time.perf_counter()
    beam = check_limits(state, body)
    catalog = await state.require_catalog(body.catalog)
    cap = state.beam_cap()[0]
    if catalog.num_sids > 0:  # a beam wider than the catalog's SID count finds nothing more
        cap = min(cap, max(catalog.num_sids, beam))
    exclude = list(dict.fromkeys([*body.exclude, *(body.history if body.exclude_history else [])]))
    deadline = time.monotonic() + state.settings.request_timeout_s
    prompt_tokens = completion_tokens = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise retry_later(
                503, "no answer within the request deadline", "deadline_exceeded",
                state.settings.retry_after_s,
            )  # fmt: skip
        request = pb.RecommendRequest(
            history_item_ids=body.history,
            n=body.n,
            beam_width=beam,
            catalog=body.catalog,
            exclude_item_ids=exclude,
            skip_unknown_items=body.skip_unknown_items,
            normalization=NORMALIZATION_PB[body.normalization],
        )
        state.metrics.beam_width.labels(ROUTE).observe(beam)
        response = await state.pool.recommend(request, timeout=remaining)
        prompt_tokens += response.usage.prompt_tokens
        completion_tokens += response.usage.completion_tokens
        more_may_exist = response.beams_returned >= beam and beam < cap
        if not response.exhausted or not more_may_exist:
            break
        beam = min(2 * beam, cap)
        state.metrics.widenings.inc()
    return {
        "items": [
            {"item_id": item.item_id, "score": item.score, "sid": list(item.sid.codes)}
            for item in response.items
        ],
        "catalog": {"name": response.catalog.name, "version": response.catalog.version},
        "model": state.model_name(),
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
        "beam_width": beam,
        "exhausted": response.exhausted,
        "skipped_history_item_ids": list(response.skipped_history_item_ids),
    }
