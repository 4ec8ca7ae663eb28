"""The messages between API processes and the engine's process, and how they are framed.

A frame is a 4-byte big-endian length and a msgpack array `[kind, call id, body]`. Bodies
are plain values built by the codecs here (a request's fields, an error, a serialized
GetInfoResponse), never a deserializer that constructs arbitrary objects. Outputs go column by
column (`encode_output`): a wide request returns thousands of hypotheses, and one value per
hypothesis field would cost the engine's process several times the columns' time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import struct
from enum import StrEnum
from typing import Any

import msgpack
import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.requests.results import BeamResult, FinishReason, RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization, RequestError
from widebeam.services.decoder.server.async_types import EngineFailure, Overloaded, ShuttingDown
from widebeam.services.decoder.server.engine_handle import ServerInfo
from widebeam.services.decoder.server.recommend import RecommendAnswer, RecommendSpec
from widebeam.services.decoder.server.request_limits import RequestLimits

_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 1 << 31  # a frame's length field is 32 bits


class Kind(StrEnum):
    # API process -> engine's process
    GENERATE = "generate"  # body: generate_body(...)
    RECOMMEND = "recommend"  # body: recommend_body(...)
    INFO = "info"  # body: None
    ABORT = "abort"  # body: None; the call id's request stops and frees its rows
    # engine's process -> API process
    HELLO = "hello"  # body: hello_body(ServerInfo), once, when the engine is ready
    OUTPUT = "output"  # body: encode_output(...)
    RECOMMENDED = "recommended"  # body: recommended_body(...)
    INFO_REPLY = "info_reply"  # body: GetInfoResponse bytes
    ERROR = "error"  # body: encode_error(...)


Message = tuple[Kind, int, Any]


async def read_message(reader: asyncio.StreamReader) -> Message:
    """The next message; asyncio.IncompleteReadError at the end of the stream."""
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    # use_list=False: arrays come back as tuples, as the engine's dataclasses hold them
    kind, call_id, body = msgpack.unpackb(await reader.readexactly(length), use_list=False)
    return Kind(kind), call_id, body


def frame(kind: Kind, call_id: int, body: Any) -> bytes:
    payload = msgpack.packb((kind.value, call_id, body))
    if len(payload) >= MAX_FRAME_BYTES:
        raise ValueError(f"a {kind.value} message of {len(payload)} bytes is too large to send")
    return _LENGTH.pack(len(payload)) + payload


# ----- requests and the engine's description ------------------------------------------------
def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def generate_body(request: GenerationRequest, timeout: float | None) -> tuple[Any, ...]:
    return _fields(request), timeout


def generate_from(body: tuple[Any, ...]) -> tuple[GenerationRequest, float | None]:
    fields, timeout = body
    fields = dict(fields, normalization=Normalization(fields["normalization"]))
    return GenerationRequest(**fields), timeout


def recommend_body(spec: RecommendSpec, timeout: float | None) -> tuple[Any, ...]:
    return dict(_fields(spec), exclude=sorted(spec.exclude)), timeout


def recommend_from(body: tuple[Any, ...]) -> tuple[RecommendSpec, float | None]:
    fields, timeout = body
    fields = dict(fields, exclude=frozenset(fields["exclude"]),
                  normalization=Normalization(fields["normalization"]))  # fmt: skip
    return RecommendSpec(**fields), timeout


def hello_body(info: ServerInfo) -> dict[str, Any]:
    layout = None if info.sid_layout is None else info.sid_layout.to_spec()
    return dict(_fields(info), sid_layout=layout, limits=_fields(info.limits))


def hello_from(body: dict[str, Any]) -> ServerInfo:
    layout = body["sid_layout"]
    return ServerInfo(**dict(
        body, sid_layout=None if layout is None else SidLayout.parse(layout),
        limits=RequestLimits(**body["limits"]),
    ))  # fmt: skip


def recommended_body(answer: RecommendAnswer) -> tuple[Any, ...]:
    return (encode_output(answer.out), answer.catalog, answer.version, answer.layout.to_spec(),
            answer.skipped)  # fmt: skip


def recommended_from(spec: RecommendSpec, body: tuple[Any, ...]) -> RecommendAnswer:
    encoded, catalog, version, layout, skipped = body
    return RecommendAnswer(
        spec, decode_output(encoded), catalog, version, SidLayout.parse(layout), tuple(skipped)
    )


# ----- outputs, column by column ----------------------------------------------------------------
_REASONS: tuple[FinishReason, ...] = ("length", "stop")


def encode_output(out: RequestOutput) -> tuple[Any, ...]:
    beams = out.beams
    count = len(beams)
    tokens = [b.output_ids for b in beams]
    lengths = np.fromiter(map(len, tokens), np.int64, count)  # [beams]
    flat = np.fromiter(itertools.chain.from_iterable(tokens), np.int64, int(lengths.sum()))
    scores = np.fromiter((b.score for b in beams), np.float64, count)  # [beams]
    cums = np.fromiter((b.cum_logprob for b in beams), np.float64, count)  # [beams]
    stops = np.fromiter((b.finish_reason == "stop" for b in beams), np.int8, count)  # [beams]
    logprobs = None
    if count and beams[0].logprobs is not None:
        logprobs = np.fromiter(
            itertools.chain.from_iterable(b.logprobs or () for b in beams), np.float64
        ).tobytes()
    items = item_counts = None
    if count and beams[0].item_ids is not None:
        per_beam = [b.item_ids or () for b in beams]
        item_counts = np.fromiter(map(len, per_beam), np.int64, count).tobytes()
        items = list(itertools.chain.from_iterable(per_beam))
    header = (out.request_id, out.error, out.catalog_version, out.prompt_tokens,
              out.cached_prompt_tokens, count)  # fmt: skip
    columns = (lengths.tobytes(), flat.tobytes(), scores.tobytes(), cums.tobytes(),
               stops.tobytes(), logprobs, item_counts, items)  # fmt: skip
    return header, columns


def decode_output(encoded: tuple[Any, ...]) -> RequestOutput:
    header, columns = encoded
    request_id, error, version, prompt_tokens, cached, count = header
    lengths, flat, scores, cums, stops, logprobs, item_counts, items = columns
    bounds = _bounds(np.frombuffer(lengths, np.int64))
    flat_tokens = np.frombuffer(flat, np.int64).tolist()
    tokens = [flat_tokens[a:b] for a, b in bounds]
    reasons = [_REASONS[s] for s in np.frombuffer(stops, np.int8).tolist()]
    per_token: list[list[float] | None] = [None] * count
    if logprobs is not None:
        values = np.frombuffer(logprobs, np.float64).tolist()
        per_token = [values[a:b] for a, b in bounds]
    per_beam_items: list[list[str] | None] = [None] * count
    if items is not None:
        items = list(items)  # a tuple off the wire; results hold lists
        per_beam_items = [items[a:b] for a, b in _bounds(np.frombuffer(item_counts, np.int64))]
    score_list = np.frombuffer(scores, np.float64).tolist()
    cum_list = np.frombuffer(cums, np.float64).tolist()
    columns_out = (tokens, score_list, cum_list, reasons, per_token, per_beam_items)
    beams = list(map(BeamResult._make, zip(*columns_out, strict=True)))
    return RequestOutput(request_id, beams, error, version, prompt_tokens, cached)


def _bounds(lengths: np.ndarray) -> list[tuple[int, int]]:
    """[(start, stop)] of consecutive runs of `lengths` ([n] int64)."""
    ends = np.cumsum(lengths)
    return list(zip((ends - lengths).tolist(), ends.tolist(), strict=True))


# ----- errors --------------------------------------------------------------------------------
class ErrorKind(StrEnum):
    REQUEST = "request"
    OVERLOADED = "overloaded"
    SHUTTING_DOWN = "shutting_down"
    TIMEOUT = "timeout"
    ENGINE = "engine"


def encode_error(exc: BaseException) -> tuple[str, str, int | None]:
    retry = None
    if isinstance(exc, RequestError):
        kind = ErrorKind.REQUEST
    elif isinstance(exc, Overloaded):
        kind, retry = ErrorKind.OVERLOADED, exc.retry_after_s
    elif isinstance(exc, ShuttingDown):
        kind = ErrorKind.SHUTTING_DOWN
    elif isinstance(exc, TimeoutError):
        kind = ErrorKind.TIMEOUT
    elif isinstance(exc, EngineFailure):
        kind = ErrorKind.ENGINE
    else:
        return ErrorKind.ENGINE.value, f"{type(exc).__name__}: {exc}", None
    return kind.value, str(exc), retry


def decode_error(encoded: tuple[str, str, int | None]) -> Exception:
    kind, message, retry = encoded
    match ErrorKind(kind):
        case ErrorKind.REQUEST:
            return RequestError(message)
        case ErrorKind.OVERLOADED:
            return Overloaded(message, retry)
        case ErrorKind.SHUTTING_DOWN:
            return ShuttingDown(message)
        case ErrorKind.TIMEOUT:
            return TimeoutError(message)
        case ErrorKind.ENGINE:
            return EngineFailure(message)
