"""Reading an upload request body into a ``SpooledUpload`` without holding it all in memory.

Two shapes: ``multipart/form-data`` (the catalog in the ``file`` part, options as further
fields) or a raw body of any other content type (options as query parameters). The body is
consumed chunk by chunk as the client sends it; the byte limit counts the whole request body
and stops reading as soon as it is exceeded (a ``Content-Length`` over the limit is refused
before reading anything).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from widebeam.services.catalog.service.spool import SpooledUpload, UploadTooLarge
from widebeam.services.http.errors import ApiError

FILE_FIELD = "file"
_MAX_FIELD_BYTES = 64 << 10  # an option field (metadata JSON included)
_MAX_PARTS = 16


@dataclass
class UploadBody:
    fields: dict[str, str] = field(default_factory=dict)  # multipart option fields
    filename: str | None = None
    multipart: bool = False


async def read_body(request: Request, spool: SpooledUpload) -> UploadBody:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > spool.limit:
        raise UploadTooLarge(spool.limit)
    content_type, params = parse_options_header(request.headers.get("content-type"))
    if content_type == b"multipart/form-data":
        body = await _read_multipart(request, spool, params.get(b"boundary"))
    elif content_type == b"application/x-www-form-urlencoded":
        raise ApiError(
            400,
            "url-encoded forms are not supported: send multipart/form-data with a 'file' part, "
            "or the catalog itself as the body",
            "unsupported_body",
        )
    else:
        # A raw body may name its file like a download does: Content-Disposition: ...; filename=
        _, disposition = parse_options_header(request.headers.get("content-disposition"))
        filename = disposition.get(b"filename")
        body = UploadBody(filename=filename.decode("utf-8", "replace")[:255] if filename else None)
        async for chunk in request.stream():
            await spool.write(chunk)
    await spool.finish()
    return body


class _PartCollector:
    """python-multipart callbacks -> a list of events, replayed asynchronously after each
    ``parser.write`` (callbacks are synchronous; spooling to disk is not)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes]] = []
        self._header_field = b""
        self._header_value = b""

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": lambda: self.events.append(("begin", b"")),
            "on_part_data": lambda d, s, e: self.events.append(("data", bytes(d[s:e]))),
            "on_part_end": lambda: self.events.append(("end", b"")),
            "on_header_field": self._on_field,
            "on_header_value": self._on_value,
            "on_header_end": self._on_header_end,
            "on_end": lambda: self.events.append(("closed", b"")),
        }

    def _on_field(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]

    def _on_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        if self._header_field.lower() == b"content-disposition":
            self.events.append(("disposition", self._header_value))
        self._header_field = self._header_value = b""


async def _read_multipart(
    request: Request, spool: SpooledUpload, boundary: bytes | None
) -> UploadBody:
    if not boundary:
        raise ApiError(400, "multipart body without a boundary parameter", "invalid_request")
    collector = _PartCollector()
    parser = MultipartParser(boundary, collector.callbacks())  # type: ignore[arg-type]
    reader = _PartReader(spool)
    received = 0
    try:
        async for chunk in request.stream():
            # The spool counts only the file part; the limit is on the whole body.
            received += len(chunk)
            if received > spool.limit:
                raise UploadTooLarge(spool.limit)
            parser.write(chunk)
            for kind, data in collector.events:
                await reader.handle(kind, data)
            collector.events.clear()
        parser.finalize()
    except MultipartParseError as exc:
        raise ApiError(400, f"malformed multipart body: {exc}", "invalid_request") from None
    if not reader.closed:
        # The parser takes a body cut short as well-formed so far; only the closing boundary
        # proves the file part is whole.
        raise ApiError(
            400,
            "multipart body ends before its closing boundary: the upload was cut off; "
            "nothing was published",
            "invalid_request",
        )
    if not reader.seen_file:
        raise ApiError(
            400,
            f"multipart upload has no '{FILE_FIELD}' part with the catalog",
            "invalid_request",
            param=FILE_FIELD,
        )
    return reader.body


class _PartReader:
    """Routes multipart events: the file part to the spool, option fields to small buffers."""

    def __init__(self, spool: SpooledUpload) -> None:
        self.spool = spool
        self.body = UploadBody(multipart=True)
        self.seen_file = False
        self.closed = False  # the closing boundary was read
        self._parts = 0
        self._name: str | None = None
        self._value = bytearray()

    async def handle(self, kind: str, data: bytes) -> None:
        if kind == "begin":
            self._parts += 1
            if self._parts > _MAX_PARTS:
                raise ApiError(400, f"more than {_MAX_PARTS} form parts", "invalid_request")
            self._name, self._value = None, bytearray()
        elif kind == "disposition":
            _, opts = parse_options_header(data)
            self._name = opts.get(b"name", b"").decode("utf-8", "replace")
            if self._name in self.body.fields or (self._name == FILE_FIELD and self.seen_file):
                raise ApiError(
                    400,
                    f"form field {self._name!r} given twice",
                    "invalid_request",
                    param=self._name,
                )
            if self._name == FILE_FIELD:
                self.seen_file = True
                if b"filename" in opts:
                    self.body.filename = opts[b"filename"].decode("utf-8", "replace")[:255]
        elif kind == "data" and self._name == FILE_FIELD:
            await self.spool.write(data)
        elif kind == "data":
            self._value += data
            if len(self._value) > _MAX_FIELD_BYTES:
                raise ApiError(
                    400,
                    f"form field {self._name!r} is too large",
                    "invalid_request",
                    param=self._name,
                )
        elif kind == "end" and self._name is not None and self._name != FILE_FIELD:
            self.body.fields[self._name] = self._value.decode("utf-8", "replace")
        elif kind == "closed":
            self.closed = True
