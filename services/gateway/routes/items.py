"""`GET /v1/items`: the items of the gateway's items file (`items_file`), found by id prefix or
title substring (`q`, paginated) or by exact ids (`id`, repeated) — the playground's item
picker and the titles beside its recommendations. 404 when no items file is configured."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query

from widebeam.services.catalog.types import CatalogError
from widebeam.services.gateway.item_index import ItemIndex, SearchPage
from widebeam.services.gateway.schemas.items import CatalogItem, ItemPage
from widebeam.services.http.error_schema import error_responses
from widebeam.services.http.errors import ApiError, bad_request

ROUTE = "/v1/items"
MAX_LIMIT = 100
MAX_OFFSET = 10_000  # a title search scans up to offset + limit matches
MAX_IDS = 100
MAX_QUERY_CHARS = 256

_ERRORS = error_responses(
    {
        400: "invalid parameter (the message names it)",
        401: "missing or invalid API key",
        404: "the gateway has no items file",
        500: "the items file cannot be read",
    }
)


class ItemSource:
    """The items file, parsed once on first use (off the event loop); a failed read is retried
    on the next request, so fixing the file needs no restart."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._index: ItemIndex | None = None
        self._lock = asyncio.Lock()

    async def index(self) -> ItemIndex:
        if self._index is not None:
            return self._index
        if self.path is None:
            raise ApiError(
                404,
                "item search needs an items file: start the gateway with --items-file "
                "(WIDEBEAM_GATEWAY_ITEMS_FILE), a catalog file with a title column",
                "items_not_configured",
            )
        async with self._lock:
            if self._index is None:
                try:
                    self._index = await asyncio.to_thread(ItemIndex.load, self.path)
                except (CatalogError, OSError) as exc:
                    message = f"the items file {self.path!r} cannot be read: {exc}"
                    raise ApiError(500, message, "items_file_unreadable") from None
            return self._index


def create_router(items_file: str | None) -> APIRouter:
    router = APIRouter(tags=["items"])
    source = ItemSource(items_file)

    @router.get(
        ROUTE,
        response_model=ItemPage,
        responses=_ERRORS,
        summary="Find catalog items by id prefix or title (the playground's item search)",
    )
    async def find_items(
        q: Annotated[
            str | None,
            Query(
                max_length=MAX_QUERY_CHARS,
                description="id prefix (case-sensitive) or title substring (case-insensitive); "
                "id matches come first, in id order, then title matches in catalog order",
            ),
        ] = None,
        item_ids: Annotated[
            list[str] | None,
            Query(alias="id", description=f"exact item ids (repeat, up to {MAX_IDS}); not with q"),
        ] = None,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20,
    ) -> ItemPage:
        if q is not None and item_ids is not None:
            raise bad_request("give either q (search) or id (exact ids), not both", param="id")
        if item_ids is not None and len(item_ids) > MAX_IDS:
            raise bad_request(f"id is repeated {len(item_ids)} times; the limit is {MAX_IDS}",
                              param="id")  # fmt: skip
        index = await source.index()
        if item_ids is not None:
            page = SearchPage(index.lookup(item_ids), None)
        else:
            page = await asyncio.to_thread(index.search, q or "", offset, limit)
        return ItemPage(
            items=[CatalogItem(**asdict(item)) for item in page.items],
            next_offset=page.next_offset,
            total_items=len(index),
        )

    return router
