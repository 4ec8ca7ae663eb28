"""How a list setting reads from one environment variable: comma-separated, each part
stripped, empty parts dropped (`"a, b,,"` is `["a", "b"]`). Used as a pydantic `before`
validator of `NoDecode` list fields, so the variable is not parsed as JSON."""

from __future__ import annotations


def split_commas(value: object) -> object:
    """`value`'s parts when it is a string; anything else (a list from a flag) unchanged."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value
