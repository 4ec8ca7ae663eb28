"""What the decoders' GetInfo tells the gateway's routes and the batch worker alike: the widest
beam allowed (and who sets it), a catalog's info (404 naming the loaded ones), the model name
to report."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.http.errors import ApiError

FALLBACK_MODEL_NAME = "widebeam"

# GetInfo: the cached answer (False; None before any decoder answered) or one asked anew (True).
InfoSource = Callable[[bool], Awaitable[pb.GetInfoResponse | None]]


def beam_cap(info: pb.GetInfoResponse | None, configured: int) -> tuple[int, str]:
    """The widest beam allowed and who sets it: `configured` (the gateway's limit) or the
    decoders' narrower one."""
    decoder_max = info.limits.max_beam_width if info and info.limits.max_beam_width else 0
    if decoder_max and decoder_max < configured:
        return decoder_max, "the decoders' limit"
    return configured, "the gateway's limit"


async def find_catalog(info_of: InfoSource, name: str) -> pb.CatalogInfo:
    """The catalog's info; 404 when no decoder serves it (after one fresh GetInfo, so a catalog
    published since the last answer is found)."""
    info = None
    for fresh in (False, True):
        info = await info_of(fresh)
        if info is None:
            continue
        for catalog in info.catalogs:
            if catalog.name == name:
                return catalog
    loaded = ", ".join(sorted(c.name for c in info.catalogs)) if info else ""
    raise ApiError(
        404,
        f"unknown catalog {name!r}; loaded: {loaded or 'none'}",
        "catalog_not_found",
        param="catalog",
    )


def reported_model_name(configured: str | None, info: pb.GetInfoResponse | None) -> str:
    """The configured name, else the decoders', else a fixed fallback (never empty)."""
    return configured or (info.model_name if info else "") or FALLBACK_MODEL_NAME
