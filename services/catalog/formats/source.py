"""Catalog input as uncompressed bytes: gzip detected by magic bytes and inflated under a cap.

A plain file on disk is read lazily (streamed by the line/batch parsers); everything else
(``bytes``, a binary stream, any gzip) is held in memory, never above ``max_bytes``. The cap
applies to the *decompressed* size, so a small gzip bomb is stopped after ``max_bytes``.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from pathlib import Path
from typing import IO

from widebeam.services.catalog.types import CatalogError

GZIP_MAGIC = b"\x1f\x8b"
DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB uncompressed; callers serving uploads pass their own limit
_CHUNK = 1 << 20


class RawInput:
    """Uncompressed catalog bytes, either ``data`` in memory or the plain file ``path``."""

    def __init__(self, data: bytes | None = None, path: Path | None = None) -> None:
        if (data is None) == (path is None):
            raise ValueError("RawInput needs exactly one of data and path")
        self.data = data
        self.path = path

    def head(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer when the input is shorter)."""
        if self.data is not None:
            return self.data[:n]
        with open(self.path, "rb") as f:  # type: ignore[arg-type]
            return f.read(n)

    def open(self) -> IO[bytes]:
        """A fresh binary stream over the whole input; the caller closes it."""
        if self.data is not None:
            return io.BytesIO(self.data)
        return open(self.path, "rb")  # type: ignore[arg-type]

    def read_all(self) -> bytes:
        if self.data is not None:
            return self.data
        with self.open() as f:
            return f.read()


def open_input(
    source: bytes | str | os.PathLike[str] | IO[bytes], max_bytes: int = DEFAULT_MAX_BYTES
) -> RawInput:
    """Resolve ``source`` (content bytes, a path, or a binary stream) to uncompressed input.

    A ``str`` is a path, never catalog text: pass text as ``bytes``.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        _check_size(len(data), max_bytes, "input")
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            size = path.stat().st_size
            _check_size(size, max_bytes, f"file {str(path)!r}")
            with open(path, "rb") as f:
                if f.read(2) != GZIP_MAGIC:
                    return RawInput(path=path)
                f.seek(0)
                return RawInput(data=_gunzip(f, max_bytes))
        except OSError as exc:
            raise CatalogError(f"cannot read catalog file {str(path)!r}: {exc}") from None
    elif hasattr(source, "read"):
        data = source.read(max_bytes + 1)
        if not isinstance(data, bytes):
            raise CatalogError("catalog stream must be binary (opened with 'rb'), got text")
        _check_size(len(data), max_bytes, "input")
    else:
        raise CatalogError(f"unsupported catalog source type {type(source).__name__}")
    if data[:2] == GZIP_MAGIC:
        data = _gunzip(io.BytesIO(data), max_bytes)
    return RawInput(data=data)


def _check_size(size: int, max_bytes: int, what: str) -> None:
    if size > max_bytes:
        raise CatalogError(f"{what} is larger than the {max_bytes}-byte limit")


def _gunzip(stream: IO[bytes], max_bytes: int) -> bytes:
    """Inflate gzip (multi-member too) chunk by chunk, stopping once past ``max_bytes``."""
    chunks: list[bytes] = []
    total = 0
    try:
        with gzip.GzipFile(fileobj=stream, mode="rb") as gz:
            while chunk := gz.read(_CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise CatalogError(
                        f"gzip input inflates to more than the {max_bytes}-byte limit"
                    )
                chunks.append(chunk)
    except EOFError:
        raise CatalogError("gzip input is truncated (no end-of-stream marker)") from None
    except (OSError, zlib.error) as exc:  # BadGzipFile is an OSError; CRC errors too
        raise CatalogError(f"gzip input is corrupt: {exc}") from None
    return b"".join(chunks)
