"""`GET /v1/items` response body: catalog items found by id prefix, title or exact id."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CatalogItem(BaseModel):
    item_id: str
    title: str | None = Field(description="the items file's title; null when it has none")
    sid: list[int] = Field(description="the item's semantic id in the items file")


class ItemPage(BaseModel):
    items: list[CatalogItem]
    next_offset: int | None = Field(description="offset of the next page; null: no more")
    total_items: int = Field(description="items in the gateway's items file")
