"""`request_from_dict` (the `widebeam generate` JSONL reader) and the `normalization` field."""

from __future__ import annotations

from typing import Any

import pytest

from widebeam.services.decoder.requests.parsing import request_from_dict
from widebeam.services.decoder.requests.spec import RequestError

BASE = {"id": "r", "input_ids": [1, 2]}


def test_normalization_defaults_to_vocab_and_accepts_sid() -> None:
    assert request_from_dict(BASE).normalization == "vocab"
    assert request_from_dict({**BASE, "normalization": None}).normalization == "vocab"
    for value in ("vocab", "sid"):
        assert request_from_dict({**BASE, "normalization": value}).normalization == value


@pytest.mark.parametrize("value", ["SID", "full", "", 1, True, ["sid"], {"sid": 1}])
def test_other_normalizations_are_named(value: Any) -> None:
    with pytest.raises(RequestError, match=r'normalization must be "vocab" or "sid", got '):
        request_from_dict({**BASE, "normalization": value})
