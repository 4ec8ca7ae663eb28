"""Parse a request dict (CLI JSONL line, later RPC/HTTP bodies) into a `GenerationRequest`."""

from __future__ import annotations

from typing import Any

from widebeam.services.decoder.requests.spec import (
    GenerationRequest,
    RequestError,
    normalization_from,
)

_INT_FIELDS = ("beam_width", "n", "max_new_tokens", "min_new_tokens", "top_k", "seed")
_FLOAT_FIELDS = ("length_penalty", "temperature", "top_p")
_BOOL_FIELDS = ("ignore_eos", "constrained", "return_logprobs")
_KNOWN = {
    "id",
    "input_ids",
    "eos_token_id",
    "early_stopping",
    "normalization",
    "catalog",  # parsed below like the rest: a field missing here is refused as unknown
    *_INT_FIELDS,
    *_FLOAT_FIELDS,
    *_BOOL_FIELDS,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def request_from_dict(data: Any) -> GenerationRequest:
    if not isinstance(data, dict):
        raise RequestError("a request must be a JSON object")
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise RequestError(f"unknown field(s): {', '.join(unknown)}")
    request_id = data.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool) or request_id == "":
        raise RequestError("id is required (a non-empty string or integer)")
    ids = data.get("input_ids")
    if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
        raise RequestError("input_ids must be a list of integer token ids")
    kwargs: dict[str, Any] = {}
    for name in _INT_FIELDS:
        if data.get(name) is not None:
            if not _is_int(data[name]):
                raise RequestError(f"{name} must be an integer, got {data[name]!r}")
            kwargs[name] = data[name]
    for name in _FLOAT_FIELDS:
        if data.get(name) is not None:
            if not (_is_int(data[name]) or isinstance(data[name], float)):
                raise RequestError(f"{name} must be a number, got {data[name]!r}")
            try:
                kwargs[name] = float(data[name])
            except OverflowError:  # a JSON integer beyond float range, e.g. 10**400
                raise RequestError(f"{name} is out of range for a number") from None
    for name in _BOOL_FIELDS:
        if data.get(name) is not None:
            if not isinstance(data[name], bool):
                raise RequestError(f"{name} must be true or false, got {data[name]!r}")
            kwargs[name] = data[name]
    if "early_stopping" in data:
        if data["early_stopping"] not in (True, False, "never"):
            raise RequestError('early_stopping must be true, false or "never"')
        kwargs["early_stopping"] = data["early_stopping"]
    if data.get("normalization") is not None:
        kwargs["normalization"] = normalization_from(data["normalization"])
    catalog = data.get("catalog")
    if catalog is not None:
        if not isinstance(catalog, str) or not catalog:
            raise RequestError("catalog must be a non-empty string")
        kwargs["catalog"] = catalog
    eos = data.get("eos_token_id")
    if eos is not None:
        eos = [eos] if _is_int(eos) else eos
        if not isinstance(eos, list) or not all(_is_int(t) for t in eos):
            raise RequestError("eos_token_id must be an integer, a list of integers, or null")
        kwargs["eos_token_id"] = tuple(eos)
    return GenerationRequest(request_id=str(request_id), input_ids=tuple(ids), **kwargs)
