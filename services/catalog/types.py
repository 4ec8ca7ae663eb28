"""The two types every catalog path shares: an (item, SID) entry and the invalid-catalog error.

Parsers (``formats/``), the trie build and the Redis store raise ``CatalogError``; the catalog
service turns it into a 422 and the decoder refuses to start on it.
"""

from __future__ import annotations

from typing import NamedTuple


class CatalogError(ValueError):
    """An invalid catalog (bad syntax, types, SIDs out of the layout, ...)."""


class CatalogEntry(NamedTuple):
    item_id: str
    sid: tuple[int, ...]
