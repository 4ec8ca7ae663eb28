"""Versioned SID-trie catalogs in Redis: publisher (:class:`CatalogStore`) and in-process
follower (:class:`CatalogSubscriber`).

Key layout: ``keys.py``; manifest fields: ``manifest.py``; artifact encoding: ``codec.py``;
how a load reads and decodes the chunks (pipelined): ``artifact_fetch.py``; a load in a child
process whose arrays are mapped into this one: ``load_process.py``; item <-> SID
lookup tables, written and read only through ``lookup.py`` (byte layout: ``lookup_layout.py``).
"""

from widebeam.services.catalog.store.eviction import EvictingRedisError, require_no_eviction
from widebeam.services.catalog.store.keys import validate_name
from widebeam.services.catalog.store.store import DEFAULT_CHUNK_BYTES, CatalogStore
from widebeam.services.catalog.store.subscriber import CatalogSubscriber
from widebeam.services.catalog.store.types import (
    ArtifactError,
    CatalogStoreError,
    InvalidNameError,
    LoadedCatalog,
    PublishedVersion,
    StagingLostError,
    VersionNotFoundError,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "ArtifactError",
    "CatalogStore",
    "CatalogStoreError",
    "CatalogSubscriber",
    "EvictingRedisError",
    "InvalidNameError",
    "LoadedCatalog",
    "PublishedVersion",
    "StagingLostError",
    "VersionNotFoundError",
    "require_no_eviction",
    "validate_name",
]
