"""The history prompt format shared by serving, the demo and training."""

from __future__ import annotations

import pytest

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.server.prompting import (
    history_prompt,
    sid_to_tokens,
    tokens_to_sid,
)

BRACKETED = SidLayout.parse("100:10,110:10;begin=98;end=99")
BARE = SidLayout.parse("100:10,110:10")


def test_bracketed_layout() -> None:
    assert sid_to_tokens(BRACKETED, (3, 4)) == [98, 103, 114, 99]
    assert history_prompt(BRACKETED, [(3, 4), (0, 9)]) == [98, 103, 114, 99, 98, 100, 119, 99, 98]
    assert history_prompt(BRACKETED, []) == [98]
    assert tokens_to_sid(BRACKETED, [98, 103, 114, 99, 7]) == (3, 4)


def test_bare_layout() -> None:
    assert history_prompt(BARE, [(3, 4), (0, 9)]) == [103, 114, 100, 119]
    assert history_prompt(BARE, []) == []
    assert tokens_to_sid(BARE, [103]) is None


def test_malformed_sids() -> None:
    with pytest.raises(ValueError, match="has 1 codes"):
        sid_to_tokens(BARE, (1,))
    with pytest.raises(ValueError, match="out of range"):
        sid_to_tokens(BARE, (1, 10))
