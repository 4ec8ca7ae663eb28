"""Recommend: the limits a request is held to, then decoder Recommend calls that widen the beam
when exclusions starve it, shaped as the `/v1/recommend` body. The one implementation behind the
route and the batch worker's rows.

Widening rule: the decoder reports `exhausted` when its beams held fewer than n distinct
non-excluded items. If that call returned a full beam (`beams_returned == beam_width`), more SIDs
may exist, so the call is repeated with the beam doubled, capped at the widest allowed beam
(min of the configured and the decoders' limits) and at the catalog's number of SIDs. It stops
when n items are found, when the beam was not full (the catalog has no more SIDs), or at the
cap; then `exhausted=true` tells the client there really are no more. Usage sums the calls."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.decoder_info import (
    InfoSource,
    beam_cap,
    find_catalog,
    reported_model_name,
)
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.metrics import GatewayMetrics
from widebeam.services.gateway.normalization import NORMALIZATION_PB
from widebeam.services.gateway.schemas.recommend import RecommendRequest
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.http.errors import ApiError, bad_request

ROUTE = "/v1/recommend"


@dataclass(frozen=True)
class RecommendLimits:
    """What one recommend request, or one batch row, may ask for (the gateway's settings)."""

    max_n: int
    max_beam_width: int
    max_history: int
    default_beam_width: int
    max_exclude: int

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> RecommendLimits:
        """The gateway's settings of the same names."""
        return cls(**{field.name: getattr(settings, field.name) for field in fields(cls)})


def check_limits(body: RecommendRequest, limits: RecommendLimits, cap: int, who: str) -> int:
    """The request's starting beam width, or a 400 naming the field. `cap` is the widest beam
    allowed now (`limits.max_beam_width`, or the decoders' narrower limit) and `who` sets it."""
    if body.n > limits.max_n:
        raise bad_request(f"n must be <= {limits.max_n} (the gateway's limit)", param="n")
    if body.beam_width is not None and body.beam_width > cap:
        raise bad_request(f"beam_width must be <= {cap} ({who})", param="beam_width")
    beam = body.beam_width or min(max(body.n, limits.default_beam_width), cap)
    if body.n > beam:
        raise bad_request(f"n ({body.n}) must be <= beam_width ({beam})", param="n")
    if len(body.history) > limits.max_history:
        raise bad_request(
            f"history has {len(body.history)} items; the limit is {limits.max_history}",
            param="history",
        )
    if len(body.exclude) > limits.max_exclude:
        raise bad_request(
            f"exclude has {len(body.exclude)} items; the limit is {limits.max_exclude}",
            param="exclude",
        )
    if not body.history and body.fallback == "none":
        raise bad_request(
            "history is empty; give at least one item id, or set fallback='prior' to get the "
            "model's unconditional recommendations",
            param="history",
        )
    return beam


def check_history_left(
    body: RecommendRequest, skipped: Sequence[str], catalog: pb.CatalogRef
) -> None:
    """The empty-history rule once the decoder has dropped the unknown ids
    (`skip_unknown_items`): a history left empty is an empty history, so it follows `fallback`
    as one does (`check_limits`) instead of silently decoding from the prior."""
    if body.fallback != "none" or not body.history or not set(body.history) <= set(skipped):
        return
    unknown = list(dict.fromkeys(body.history))
    shown = ", ".join(repr(item) for item in unknown[:10])
    more = f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else ""
    raise bad_request(
        f"history is empty once its unknown ids are skipped: none of {shown}{more} is in "
        f"catalog {catalog.name!r} version {catalog.version}; give at least one known item id, "
        "or set fallback='prior' to get the model's unconditional recommendations",
        param="history",
    )


@dataclass(frozen=True)
class Recommender:
    """Decodes recommend requests through `pool`. `max_beam_width` caps the widening (the
    decoders' own limit applies too); `model_name` overrides the decoders' in the answer;
    `metrics`, when given, records each call's beam and each widening."""

    pool: DecoderPool
    info_of: InfoSource
    max_beam_width: int
    model_name: str | None = None
    metrics: GatewayMetrics | None = None

    async def beam_cap(self) -> tuple[int, str]:
        return beam_cap(await self.info_of(False), self.max_beam_width)

    async def recommend(
        self, body: RecommendRequest, beam: int, *, timeout_s: float, late: ApiError
    ) -> dict[str, object]:
        """The `/v1/recommend` body for `body` decoded from beam width `beam`; raises `late`
        when the calls have not answered within `timeout_s`, and the decoders' `ApiError`s."""
        started = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        catalog = await find_catalog(self.info_of, body.catalog)
        info = await self.info_of(False)
        cap = beam_cap(info, self.max_beam_width)[0]
        if catalog.num_sids > 0:  # a beam wider than the catalog's SID count finds nothing more
            cap = min(cap, max(catalog.num_sids, beam))
        history = body.history if body.exclude_history else []
        exclude = list(dict.fromkeys([*body.exclude, *history]))
        prompt_tokens = completion_tokens = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise late
            request = pb.RecommendRequest(
                history_item_ids=body.history,
                n=body.n,
                beam_width=beam,
                catalog=body.catalog,
                exclude_item_ids=exclude,
                skip_unknown_items=body.skip_unknown_items,
                normalization=NORMALIZATION_PB[body.normalization],
            )
            if self.metrics is not None:
                self.metrics.beam_width.labels(ROUTE).observe(beam)
            response = await self.pool.recommend(request, timeout=remaining)
            check_history_left(body, response.skipped_history_item_ids, response.catalog)
            prompt_tokens += response.usage.prompt_tokens
            completion_tokens += response.usage.completion_tokens
            more_may_exist = response.beams_returned >= beam and beam < cap
            if not response.exhausted or not more_may_exist:
                break
            beam = min(2 * beam, cap)
            if self.metrics is not None:
                self.metrics.widenings.inc()
        return {
            "items": [
                {"item_id": item.item_id, "score": item.score, "sid": list(item.sid.codes)}
                for item in response.items
            ],
            "catalog": {"name": response.catalog.name, "version": response.catalog.version},
            "model": reported_model_name(self.model_name, info),
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
