"""Manifest of one published catalog version (stored as JSON, written last).

Fields::

    schema            "widebeam.catalog.manifest/1"
    name, version     catalog name and its integer version
    artifact_id       random hex, unique per publish (tells apart reused version numbers
                      after Redis lost its data)
    created_at        ISO-8601 UTC time of the publish
    content_hash      SidTrie.content_hash (layout + item/SID content)
    layout            SidLayout.to_dict();  layout_spec: SidLayout.to_spec()
    stats             SidTrie.stats()
    dense_cell_budget budget the trie was built with (load rebuilds dense tables with it)
    artifact          encoding, compression, raw/payload bytes, payload_sha256, chunk_count,
                      chunk_sizes, chunk_sha256 (see ``codec.py``)
    lookup            layout, depth, item_buckets, sid_buckets of the lookup tables (see
                      ``keys.py``, ``lookup.py``)
    metadata          caller-supplied JSON object (source format, item count, extra tables...)
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from widebeam.services.catalog.trie import SidTrie

SCHEMA = "widebeam.catalog.manifest/1"


def check_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Reject metadata that is not a JSON object before anything is written."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        return json.loads(json.dumps(metadata, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"metadata is not JSON-serialisable: {exc}") from None


def build_manifest(
    name: str,
    version: int,
    trie: SidTrie,
    artifact: dict[str, Any],
    lookup: dict[str, Any],
    metadata: dict[str, Any],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "name": name,
        "version": version,
        "artifact_id": uuid.uuid4().hex,
        "created_at": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "content_hash": trie.content_hash,
        "layout": trie.layout.to_dict(),
        "layout_spec": trie.layout.to_spec(),
        "stats": trie.stats(),
        "dense_cell_budget": trie.dense_cell_budget,
        "artifact": artifact,
        "lookup": lookup,
        "metadata": metadata,
    }


def lookup_record(manifest: dict[str, Any]) -> dict[str, Any]:
    """The small ``lookup`` key: what a lookup needs without parsing the whole manifest."""
    return {"artifact_id": manifest["artifact_id"], **manifest["lookup"]}
