"""Bulk HSET / SET writer that packs RESP itself and streams it over one pooled connection.

redis-py's generic command packing costs several microseconds per argument, which made packing
the bulk of a publish. Here each field costs one bytes-format operation, and a SET's value may
be given in parts (memoryviews of numpy buffers) that are copied once, into the batch.
Requests are sent every ``flush_bytes``; the replies to one batch are read after the next batch
is sent, so Redis executes a batch while this process packs the next one.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

import redis


class BulkWriter:
    def __init__(self, client: redis.Redis, flush_bytes: int = 8 << 20) -> None:
        self.client = client
        self.flush_bytes = flush_bytes
        self._parts: list[bytes | memoryview] = []
        self._mset_parts: list[bytes | memoryview] = []  # key/value pairs of the open MSET
        self._mset_pairs = 0
        self._bytes = 0
        self._commands = 0
        self._unread = 0  # commands sent whose replies are not read yet
        self._conn: redis.connection.Connection | None = None

    def __enter__(self) -> BulkWriter:
        pool = self.client.connection_pool
        try:
            self._conn = pool.get_connection()
        except TypeError:  # redis-py < 5.3 requires a command name
            self._conn = pool.get_connection("HSET")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        try:
            if exc_type is None:
                self._flush(conn)
                self._read_replies(conn)
            elif conn is not None:
                conn.disconnect()  # replies may be pending: never hand back a desynced socket
        finally:
            if conn is not None:
                self.client.connection_pool.release(conn)

    def hset(self, key: bytes, fields: Sequence[bytes], values: Sequence[bytes]) -> None:
        """Queue ``HSET key f0 v0 f1 v1 ...``."""
        if len(fields) != len(values):
            raise ValueError(f"HSET {key!r}: {len(fields)} fields but {len(values)} values")
        self._close_mset()  # commands go out in the order they were queued
        parts = self._parts
        parts.append(b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n" % (2 + 2 * len(fields), len(key), key))
        size = 0
        for f, v in zip(fields, values, strict=True):
            parts.append(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(f), f, len(v), v))
            size += len(f) + len(v) + 16
        self._commands += 1
        self._bytes += size
        if self._bytes >= self.flush_bytes:
            self._flush(self._conn)

    def set(self, key: bytes, value_parts: Sequence[bytes | memoryview]) -> None:
        """Queue ``SET key value``, ``value`` being the parts back to back. Consecutive SETs go
        out as one MSET per batch: one reply to read instead of one per key."""
        size = sum(map(len, value_parts))
        pairs = self._mset_parts
        pairs.append(b"$%d\r\n%s\r\n$%d\r\n" % (len(key), key, size))
        pairs.extend(value_parts)
        pairs.append(b"\r\n")
        self._mset_pairs += 1
        self._bytes += size + len(key) + 32
        if self._bytes >= self.flush_bytes:
            self._flush(self._conn)

    def _close_mset(self) -> None:
        if self._mset_pairs:
            self._parts.append(b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * self._mset_pairs))
            self._parts.extend(self._mset_parts)
            self._commands += 1
            self._mset_parts, self._mset_pairs = [], 0

    def _flush(self, conn: redis.connection.Connection | None) -> None:
        self._close_mset()
        if conn is None or not self._commands:
            return
        payload = b"".join(self._parts)
        commands = self._commands
        self._parts, self._bytes, self._commands = [], 0, 0
        conn.send_packed_command([payload])
        self._read_replies(conn)  # of the batch before, which Redis ran while this one was packed
        self._unread = commands

    def _read_replies(self, conn: redis.connection.Connection | None) -> None:
        unread, self._unread = self._unread, 0
        if conn is None:
            return
        first_error: redis.ResponseError | None = None
        for _ in range(unread):
            try:
                conn.read_response()
            except redis.ResponseError as exc:  # keep reading so the socket stays in sync
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
