"""`POST /v1/recommend` request and response bodies."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.gateway.normalization import NORMALIZATION_DOC, Normalization
from widebeam.services.gateway.schemas.common import Bool, Int, Text, Usage

MAX_ITEM_ID_CHARS = 512


def _item_id(value: object) -> object:
    # Numeric ids are common in JSON; catalogs store ids as strings, so "42" and 42 are one item.
    if isinstance(value, bool):
        raise ValueError("item ids are strings or integers, not booleans")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and not 1 <= len(value) <= MAX_ITEM_ID_CHARS:
        raise ValueError(f"item ids must have 1..{MAX_ITEM_ID_CHARS} characters")
    return value


ItemId = Annotated[Text, BeforeValidator(_item_id)]


class RecommendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: Text | None = Field(None, max_length=256, description="for your logs; not used")
    history: list[ItemId] = Field(
        default_factory=list, description="the user's items, oldest first"
    )
    n: Int = Field(10, ge=1, description="items to return")
    beam_width: Int | None = Field(
        None, ge=1, description="beams searched (>= n); default max(n, the gateway's default)"
    )
    catalog: Text = Field(DEFAULT_CATALOG, min_length=1, max_length=256)
    exclude: list[ItemId] = Field(default_factory=list, description="items never returned")
    exclude_history: Bool = Field(True, description="also never return the history's items")
    skip_unknown_items: Bool = Field(
        False, description="drop history ids the catalog does not know instead of a 400"
    )
    fallback: Literal["none", "prior"] = Field(
        "none",
        description="empty history, or one that skip_unknown_items emptied: 'none' rejects "
        "it (400); 'prior' decodes from the SID begin token alone (the model's unconditional "
        "next-item distribution)",
    )
    normalization: Normalization = Field("vocab", description=NORMALIZATION_DOC)
    timeout_ms: Int | None = Field(
        None,
        ge=1,
        description="this request's deadline in milliseconds (at most the gateway's request "
        "timeout, its default): a decoder that predicts it cannot answer in time refuses it at "
        "once (429 with Retry-After) instead of queueing it; an answer later than the deadline "
        "is a 503",
    )


class RecommendedItem(BaseModel):
    item_id: str
    score: float = Field(description="score of the beam (SID) that produced the item")
    sid: list[int] = Field(description="the item's semantic id, one code per level")


class CatalogRef(BaseModel):
    name: str
    version: str


class RecommendResponse(BaseModel):
    items: list[RecommendedItem]
    catalog: CatalogRef = Field(description="the catalog version every item comes from")
    model: str
    usage: Usage = Field(description="summed over the decoder calls (see beam widening)")
    latency_ms: float
    beam_width: int = Field(description="the beam width of the call that produced the items")
    exhausted: bool = Field(description="fewer than n items: the catalog has no more to offer")
    skipped_history_item_ids: list[str] = Field(default_factory=list)
