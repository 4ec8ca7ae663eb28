"""``SpooledUpload``: an upload body held in memory while small, in a temp file once large.

The catalog parsers stream a *file path* lazily (JSONL/CSV line by line), but read a bytes
object or stream whole, so large bodies go to a named temp file whose path is handed to
``load_catalog``. The size limit is enforced on every write, before the data is kept.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import anyio.to_thread

_FLUSH_BYTES = 1 << 20  # batch disk writes: one worker-thread hop per MiB, not per chunk


class UploadTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"upload is larger than the {limit}-byte limit")
        self.limit = limit


class SpooledUpload:
    def __init__(self, limit: int, memory_bytes: int, spool_dir: str | None = None) -> None:
        self.limit = limit
        self.memory_bytes = memory_bytes
        self.spool_dir = spool_dir
        self.size = 0
        self._buffer = bytearray()
        self._path: Path | None = None
        self._fd: int | None = None

    async def write(self, chunk: bytes) -> None:
        """Append ``chunk``; raises UploadTooLarge (keeping nothing more) past the limit."""
        if not chunk:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            raise UploadTooLarge(self.limit)
        self._buffer += chunk
        if self._fd is None and len(self._buffer) > self.memory_bytes:
            fd, name = tempfile.mkstemp(prefix="widebeam-upload-", dir=self.spool_dir)
            self._fd, self._path = fd, Path(name)
        if self._fd is not None and len(self._buffer) >= _FLUSH_BYTES:
            await self._flush()

    async def finish(self) -> None:
        """Flush what is buffered (call once the body is complete)."""
        if self._fd is not None and self._buffer:
            await self._flush()

    async def _flush(self) -> None:
        data, self._buffer = bytes(self._buffer), bytearray()
        await anyio.to_thread.run_sync(_write_all, self._fd, data)

    def source(self) -> bytes | Path:
        """What ``load_catalog`` reads: the bytes, or the temp file's path."""
        return self._path if self._path is not None else bytes(self._buffer)

    @property
    def on_disk(self) -> bool:
        return self._path is not None

    def close(self) -> None:
        """Delete the temp file (idempotent)."""
        self._buffer = bytearray()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
