"""Redis key layout of the catalog store.

``ns`` is the store namespace (default ``widebeam``), ``n`` a catalog name, ``v`` a version::

    {ns}:catalogs                         SET     names with at least one committed version
    {ns}:catalog-events                   STREAM  {name, version, action: publish|activate,
                                                  current: 1|0}, trimmed to MAXLEN ~ 10000
    {ns}:cat:{n}:seq                      STRING  INCR counter handing out version numbers
    {ns}:cat:{n}:current                  STRING  version readers should serve
    {ns}:cat:{n}:versions                 ZSET    committed versions (member = score = version)
    {ns}:cat:{n}:staging                  ZSET    versions being written (score = start time);
                                                  stale entries are garbage-collected
    {ns}:cat:{n}:v:{v}:manifest           STRING  manifest JSON (see ``manifest.py``)
    {ns}:cat:{n}:v:{v}:lookup             STRING  JSON {artifact_id, layout, depth, num_items,
                                                  item_buckets, sid_buckets, names_per_bucket}
    {ns}:cat:{n}:v:{v}:chunk:{i}          STRING  i-th chunk of the compressed trie artifact
    {ns}:cat:{n}:v:{v}:nb:{k}             STRING  item ids of trie positions k*128 .. k*128+127
    {ns}:cat:{n}:v:{v}:ib:{b}             STRING  item records (hash, position, SID) of bucket b
    {ns}:cat:{n}:v:{v}:sb:{b}             STRING  SID records (hash, items' positions, codes)

Chunks and lookup buckets are written first; one Lua script then writes ``manifest`` and
``lookup``, adds ``v`` to ``versions``, moves ``current`` and appends the event, so a version is
either complete and visible or invisible. Lookup tables are split into buckets of ~100 records,
each one binary STRING (layout ``packed/1``: ``lookup_layout.py``); their sizes live in the
``lookup`` key. Versions written before that layout (their ``lookup`` key has no
``layout``: ``hash/1``) hold instead::

    {ns}:cat:{n}:v:{v}:items:{b}          HASH    item_id -> "c0,c1,...,c{L-1}" (its SID)
    {ns}:cat:{n}:v:{v}:sids:{b}           HASH    "c0,...,c{L-1}" -> JSON list of item ids

with ``b = crc32(utf-8 key) % buckets``; ``lookup.py`` reads both layouts. Everything of a
version shares the prefix ``{ns}:cat:{n}:v:{v}:``, which retention deletes with SCAN + UNLINK.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from widebeam.services.catalog.store.types import InvalidNameError

# Starting with a letter or digit: no ".", "..", ".hidden" or "-flag" names, which paths, URLs
# and command lines would read as something else.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# ':' is allowed in a namespace (a common Redis convention) but never in a catalog name, so
# one catalog's key prefix can never be a prefix of another's.
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def validate_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidNameError(
            f"invalid catalog name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . -, "
            "starting with a letter or digit"
        )
    return name


def validate_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE_RE.fullmatch(namespace):
        raise InvalidNameError(
            f"invalid namespace {namespace!r}: use 1-64 characters from A-Z a-z 0-9 _ . : -"
        )
    return namespace


def bucket_of(key: str, buckets: int) -> int:
    """Bucket of a lookup key in the ``hash/1`` layout (crc32 of its UTF-8 bytes)."""
    return zlib.crc32(key.encode("utf-8")) % buckets


def sid_key(codes: object) -> str:
    """Canonical text of a SID: ``"c0,c1,..."``; accepts that text or a sequence of ints."""
    if isinstance(codes, str):
        parts = codes.replace(" ", "").split(",")
        return ",".join(str(int(p)) for p in parts)
    return ",".join(str(int(c)) for c in codes)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class NamespaceKeys:
    ns: str

    @property
    def catalogs(self) -> str:
        return f"{self.ns}:catalogs"

    @property
    def events(self) -> str:
        return f"{self.ns}:catalog-events"

    def catalog(self, name: str) -> CatalogKeys:
        return CatalogKeys(f"{self.ns}:cat:{validate_name(name)}")


@dataclass(frozen=True)
class CatalogKeys:
    prefix: str

    @property
    def seq(self) -> str:
        return f"{self.prefix}:seq"

    @property
    def current(self) -> str:
        return f"{self.prefix}:current"

    @property
    def versions(self) -> str:
        return f"{self.prefix}:versions"

    @property
    def staging(self) -> str:
        return f"{self.prefix}:staging"

    def version(self, version: int) -> VersionKeys:
        return VersionKeys(f"{self.prefix}:v:{int(version)}")


@dataclass(frozen=True)
class VersionKeys:
    prefix: str

    @property
    def manifest(self) -> str:
        return f"{self.prefix}:manifest"

    @property
    def lookup(self) -> str:
        return f"{self.prefix}:lookup"

    @property
    def pattern(self) -> str:
        """SCAN pattern matching every key of this version (names hold no glob characters)."""
        return f"{self.prefix}:*"

    def chunk(self, index: int) -> str:
        return f"{self.prefix}:chunk:{index}"

    def name_bucket(self, bucket: int) -> str:
        return f"{self.prefix}:nb:{bucket}"

    def item_bucket(self, bucket: int) -> str:
        return f"{self.prefix}:ib:{bucket}"

    def sid_bucket(self, bucket: int) -> str:
        return f"{self.prefix}:sb:{bucket}"

    def items(self, bucket: int) -> str:
        """Item -> SID HASH of the ``hash/1`` layout."""
        return f"{self.prefix}:items:{bucket}"

    def sids(self, bucket: int) -> str:
        """SID -> items HASH of the ``hash/1`` layout."""
        return f"{self.prefix}:sids:{bucket}"
