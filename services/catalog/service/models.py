"""Pydantic models of the HTTP API (the boundary only: inside, the store's dicts and types).

The error body is the shared one, `widebeam.services.http.error_schema.ErrorResponse`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TrieStats(BaseModel):
    nodes_per_depth: list[int]
    num_nodes: int
    num_edges: int
    max_branching: int
    num_items: int
    num_sids: int
    dense_depths: list[int] = Field(description="trie depths that also have a dense table")


class Layout(BaseModel):
    spec: str = Field(examples=["1000:8192,9192:8192,17384:8192;begin=998;end=999"])
    depth: int
    codebook_sizes: list[int]
    begin_token_id: int | None
    end_token_id: int | None


class UploadResult(BaseModel):
    name: str
    version: int
    content_hash: str
    stats: TrieStats
    activated: bool = Field(description="whether `current` now points at this version")
    format: str = Field(description="detected or given input format")
    layout: Layout


class CatalogSummary(BaseModel):
    name: str
    current_version: int | None


class CatalogList(BaseModel):
    catalogs: list[CatalogSummary]


class VersionInfo(BaseModel):
    name: str
    version: int
    current: bool
    content_hash: str
    created_at: str
    layout: Layout
    stats: TrieStats
    artifact: dict[str, Any] = Field(description="encoding, sizes, chunk count")
    metadata: dict[str, Any]


class CatalogInfo(BaseModel):
    name: str
    current_version: int | None
    versions: list[int] = Field(description="committed versions still retained, ascending")
    current: VersionInfo | None = Field(description="summary of the current version")


class ActivateRequest(BaseModel):
    version: int = Field(ge=1)


class ActivateResult(BaseModel):
    name: str
    version: int
    previous_version: int | None


class ItemLookup(BaseModel):
    name: str
    version: int
    item_id: str
    sid: list[int]


class SidLookup(BaseModel):
    name: str
    version: int
    sid: list[int]
    item_ids: list[str] = Field(description="items with this SID, most popular first")


class Status(BaseModel):
    status: str


def layout_model(layout: dict[str, Any], spec: str) -> Layout:
    """From a manifest's ``layout`` dict (``SidLayout.to_dict``) and ``layout_spec``."""
    sizes = [int(lv["size"]) for lv in layout["levels"]]
    return Layout(
        spec=spec,
        depth=len(sizes),
        codebook_sizes=sizes,
        begin_token_id=layout.get("begin_token_id"),
        end_token_id=layout.get("end_token_id"),
    )


def version_info(manifest: dict[str, Any], current: int | None) -> VersionInfo:
    artifact = {
        k: v for k, v in manifest["artifact"].items() if k not in ("chunk_sizes", "chunk_sha256")
    }
    return VersionInfo(
        name=manifest["name"],
        version=int(manifest["version"]),
        current=current == int(manifest["version"]),
        content_hash=manifest["content_hash"],
        created_at=manifest["created_at"],
        layout=layout_model(manifest["layout"], manifest["layout_spec"]),
        stats=TrieStats(**manifest["stats"]),
        artifact=artifact,
        metadata=manifest.get("metadata") or {},
    )
