"""Bad input at the request parsers: regressions for what the property tests found, and the
`widebeam generate` line reader."""

from __future__ import annotations

import io

import pytest

from widebeam.services.decoder.cli_generate import _read_requests
from widebeam.services.decoder.requests.parsing import request_from_dict
from widebeam.services.decoder.requests.spec import RequestError

BASE = {"id": "r", "input_ids": [1, 2]}


@pytest.mark.parametrize("field", ["length_penalty", "temperature", "top_p"])
def test_integer_beyond_float_range_is_a_request_error(field: str) -> None:
    with pytest.raises(RequestError, match=f"{field} is out of range"):
        request_from_dict({**BASE, field: 10**400})


def test_catalog_field_is_accepted() -> None:
    assert request_from_dict({**BASE, "catalog": "shop"}).catalog == "shop"
    with pytest.raises(RequestError, match="catalog must be a non-empty string"):
        request_from_dict({**BASE, "catalog": ""})


def test_generate_reader_survives_an_integer_over_the_digit_limit() -> None:
    line = '{"id": 1, "input_ids": [1], "seed": ' + "1" * 5000 + "}\n"
    (out,) = _read_requests(io.StringIO(line))
    assert getattr(out, "error", "").startswith("line 1: invalid JSON")
