"""Value types and errors shared by the catalog store and its subscriber."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from widebeam.services.catalog.trie import SidTrie

# What a consumer derives from each loaded trie (named arrays), run where the version loads: in
# the load child when there is one, so the consumer's own process spends no CPU on it. A
# module-level function: the child imports it by name.
Derive = Callable[[SidTrie], dict[str, np.ndarray]]


class CatalogStoreError(Exception):
    """Base class of the catalog store's errors."""


class InvalidNameError(CatalogStoreError, ValueError):
    """A catalog name (or namespace) outside the allowed character set / length."""


class VersionNotFoundError(CatalogStoreError, LookupError):
    """No complete version with that name/number (never published, or deleted by retention)."""


class ArtifactError(CatalogStoreError):
    """A stored artifact is damaged: missing chunk, checksum mismatch, undecodable payload."""


class StagingLostError(CatalogStoreError):
    """A publish found its staging entry gone at commit time: Redis lost its data (a restart
    without persistence, a flush, a failover to an empty replica) or the publish outlived
    ``staging_ttl_s``. Nothing was made current; publishing again is the remedy."""


@dataclass(frozen=True)
class PublishedVersion:
    """Result of :meth:`CatalogStore.publish`.

    ``activated`` is False only when a concurrent publisher already committed a newer version,
    which then stays ``current`` (the newest published version wins a race).
    """

    name: str
    version: int
    content_hash: str
    activated: bool
    manifest: dict[str, Any]


@dataclass(frozen=True, eq=False)
class LoadedCatalog:
    """One immutable, verified catalog version; safe to share between threads.

    Holders keep their object for as long as they need it (pinning by reference): the
    subscriber swaps in new objects and never mutates an old one.
    """

    name: str
    version: int
    trie: SidTrie
    manifest: dict[str, Any]
    derived: Mapping[str, np.ndarray] = field(default_factory=dict)  # the subscriber's `derive`

    @property
    def artifact_id(self) -> str:
        """Unique per publish; tells apart equal version numbers after Redis lost its data."""
        return str(self.manifest["artifact_id"])

    @property
    def content_hash(self) -> str:
        return str(self.manifest["content_hash"])
