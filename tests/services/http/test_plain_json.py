"""`plain_json` writes what the standard library would (the same values, read back), refuses
non-finite floats as FastAPI's rendering does, and keeps strings that hold their names."""

from __future__ import annotations

import json
import math
import random

import pytest

from widebeam.services.http.plain_json import plain_json


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(7 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2**63), 2**63)
    if kind == 2:
        edge_cases = [0.0, -0.0, 1e-300, 5e-324, 1.7976931348623157e308]
        return rng.choice([*edge_cases, rng.uniform(-1e6, 1e6)])
    if kind == 3:
        return rng.uniform(-50.0, 0.0)  # a beam score
    if kind == 4:
        return "".join(rng.choice('ab"\\\n\t\u00e9\u4e2d\U0001f600 NaN') for _ in range(8))
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_bodies_read_back_as_the_standard_librarys() -> None:
    rng = random.Random(0)
    for _ in range(300):
        value = {"choices": [_random_value(rng) for _ in range(5)]}
        body = plain_json(value).body
        assert json.loads(body) == json.loads(json.dumps(value, ensure_ascii=False))


def test_strings_naming_non_finite_values_are_kept() -> None:
    value = {"text": "NaN and -Infinity", "item_id": "Infinity"}
    assert json.loads(plain_json(value).body) == value


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused(number: float) -> None:
    with pytest.raises(ValueError):
        plain_json({"choices": [{"score": number}]})


def test_status_and_media_type() -> None:
    response = plain_json({"a": 1}, status_code=201)
    assert response.status_code == 201
    assert response.media_type == "application/json"
