"""The blocking half of an upload (run in worker threads): layout resolution, parse + validate
+ trie build, publish."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from widebeam.services.catalog.formats import load_trie
from widebeam.services.catalog.service.options import RESERVED_METADATA, UploadOptions
from widebeam.services.catalog.service.state import ServiceState
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import PublishedVersion, VersionNotFoundError
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.http.errors import ApiError

NO_LAYOUT = (
    "no SID layout for catalog {name!r}: pass sid_layout=BASE:SIZE,...[;begin=ID;end=ID] "
    "(CLI: --sid-layout or --model DIR), or configure the service's default "
    "(WIDEBEAM_CATALOG_SID_LAYOUT or WIDEBEAM_CATALOG_MODEL_DIR); later versions reuse the "
    "current version's layout"
)


def resolve_layout(state: ServiceState, name: str, spec: str | None) -> SidLayout:
    """The request's layout, else the current version's, else the service default."""
    if spec is not None:
        try:
            return SidLayout.parse(spec)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_layout", param="sid_layout") from None
    for _ in range(3):  # `current` may move (and retention drop its old target) meanwhile
        current = state.store.current_version(name)
        if current is None:
            break
        try:
            return SidLayout.from_dict(state.store.manifest(name, current)["layout"])
        except VersionNotFoundError:
            continue
    layout = state.default_layout()
    if layout is None:
        raise ApiError(400, NO_LAYOUT.format(name=name), "no_layout", param="sid_layout")
    return layout


def build(
    source: bytes | Path,
    options: UploadOptions,
    layout: SidLayout,
    max_inflated: int,
    max_items: int | None = None,
) -> tuple[SidTrie, str]:
    """Parse, validate against ``layout`` and build the trie; CatalogError names the row/key."""
    return load_trie(
        source,
        layout,
        format=options.format,
        codebook_size=options.codebook_size,
        max_bytes=max_inflated,
        max_items=max_items,
    )


def publish(
    state: ServiceState,
    name: str,
    trie: SidTrie,
    options: UploadOptions,
    source: dict[str, Any],
) -> PublishedVersion:
    metadata = {**(options.metadata or {}), RESERVED_METADATA: source}
    return state.store.publish(name, trie, metadata, activate=options.activate)


def source_info(fmt: str, size: int, filename: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {"format": fmt, "bytes": size}
    if filename:
        info["filename"] = os.path.basename(filename)
    return info
