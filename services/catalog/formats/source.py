"""Catalog input as uncompressed bytes: gzip detected by magic bytes and inflated as it is read.

Plain input (a file on disk or bytes) is read as it is; gzip input stays compressed and is
inflated chunk by chunk while a parser reads it, so a line parser's working set is its rows, not
the inflated text. The cap applies to the *decompressed* size and is checked as the stream is
read: a small gzip bomb is stopped after ``max_bytes`` without ever holding them.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import IO, Any

from widebeam.services.catalog.types import CatalogError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB uncompressed; callers serving uploads pass their own limit
_CHUNK = 1 << 20


class RawInput:
    """Catalog input: ``data`` in memory or the file ``path``; with ``gzip`` those hold the
    compressed bytes and every read inflates them, under ``max_bytes``."""

    def __init__(
        self,
        data: bytes | None = None,
        path: Path | None = None,
        gzip: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if (data is None) == (path is None):
            raise ValueError("RawInput needs exactly one of data and path")
        self.data = data
        self.path = path
        self.gzip = gzip
        self.max_bytes = max_bytes

    @property
    def seekable_path(self) -> Path | None:
        """The plain file itself, for readers that seek (Parquet); None for gzip or bytes."""
        return None if self.gzip else self.path

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer when the input is shorter)."""
        if self.data is not None and not self.gzip:
            return self.data[:n]
        with self.open() as f:
            return f.read(n)

    def open(self) -> IO[bytes]:
        """A fresh binary stream over the whole (uncompressed) input; the caller closes it."""
        if self.data is not None:
            raw: IO[bytes] = io.BytesIO(self.data)
        else:
            raw = open(self.path, "rb")  # type: ignore[arg-type]  # noqa: SIM115 (the caller closes it)
        if not self.gzip:
            return raw
        return io.BufferedReader(_Inflating(raw, self.max_bytes), _CHUNK)

    def read_all(self) -> bytes:
        if self.data is not None and not self.gzip:
            return self.data
        with self.open() as f:
            return f.read()


class _Inflating(io.RawIOBase):
    """gzip (multi-member too) inflated on read; CatalogError once past ``max_bytes``, or on a
    truncated or corrupt stream."""

    def __init__(self, compressed: IO[bytes], max_bytes: int) -> None:
        self._compressed = compressed
        self._gz = gzip.GzipFile(fileobj=compressed, mode="rb")
        self._max_bytes = max_bytes
        self._total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            n = self._gz.readinto(buffer)
        except EOFError:
            raise CatalogError("gzip input is truncated (no end-of-stream marker)") from None
        except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError; CRC errors too
            raise CatalogError(f"gzip input is corrupt: {exc}") from None
        self._total += n
        if self._total > self._max_bytes:
            raise CatalogError(f"gzip input inflates to more than the {self._max_bytes}-byte limit")
        return n

    def close(self) -> None:
        if not self.closed:
            self._gz.close()
            self._compressed.close()
        super().close()


def open_input(
    source: bytes | str | os.PathLike[str] | IO[bytes], max_bytes: int = DEFAULT_MAX_BYTES
) -> RawInput:
    """Resolve ``source`` (content bytes, a path, or a binary stream) to catalog input.

    A ``str`` is a path, never catalog text: pass text as ``bytes``.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with open(path, "rb") as f:
                compressed = f.read(2) == GZIP_MAGIC
            if not compressed:
                _check_size(path.stat().st_size, max_bytes, f"file {str(path)!r}")
            return RawInput(path=path, gzip=compressed, max_bytes=max_bytes)
        except OSError as exc:
            raise CatalogError(f"cannot read catalog file {str(path)!r}: {exc}") from None
    elif hasattr(source, "read"):
        data = source.read(max_bytes + 1)
        if not isinstance(data, bytes):
            raise CatalogError("catalog stream must be binary (opened with 'rb'), got text")
    else:
        raise CatalogError(f"unsupported catalog source type {type(source).__name__}")
    compressed = data[:2] == GZIP_MAGIC
    if not compressed:
        _check_size(len(data), max_bytes, "input")
    return RawInput(data=data, gzip=compressed, max_bytes=max_bytes)


def _check_size(size: int, max_bytes: int, what: str) -> None:
    if size > max_bytes:
        raise CatalogError(f"{what} is larger than the {max_bytes}-byte limit")
