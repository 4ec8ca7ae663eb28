"""The history prompt format shared by serving, the demo and training."""

from __future__ import annotations

import random

import numpy as np
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


def _codes_by_level_lookup(layout: SidLayout, tokens: list[int]) -> tuple[int, ...] | None:
    """The rule stated plainly: a token counts when its level is the one expected next."""
    codes: list[int] = []
    for token in tokens:
        hit = layout.token_to_code(token)
        if hit is not None and hit[0] == len(codes):
            codes.append(hit[1])
    return tuple(codes) if len(codes) == layout.depth else None


@pytest.mark.parametrize("spec", ["110:10,100:10;begin=98;end=99", "100:10,110:10,90:5"])
def test_paths_read_as_the_level_rule_reads_them(spec: str) -> None:
    """Random token runs (SID tokens of any level, out of order, begin/end/EOS and others)."""
    layout = SidLayout.parse(spec)
    rng = random.Random(0)
    for _ in range(3000):
        tokens = [rng.randrange(85, 125) for _ in range(rng.randrange(8))]
        assert tokens_to_sid(layout, tokens) == _codes_by_level_lookup(layout, tokens), tokens


@pytest.mark.parametrize("layout", [BRACKETED, BARE, SidLayout.parse("100:10;end=99")])
def test_history_arrays_prompt_as_their_tuples_do(layout: SidLayout) -> None:
    """A resolved history comes as an [items, L] int32 array: the same prompt, and for a SID
    that does not fit, the same error as its tuples give."""
    rng = np.random.default_rng(0)
    sizes = [lv.size for lv in layout.levels]
    for items in (0, 1, 7):
        history = np.stack([rng.integers(0, s, items) for s in sizes], axis=1).astype(np.int32)
        as_tuples = [tuple(codes) for codes in history.tolist()]
        assert history_prompt(layout, history) == history_prompt(layout, as_tuples)
    bad = np.array([[1] * layout.depth, [sizes[0]] + [0] * (layout.depth - 1)], dtype=np.int32)
    with pytest.raises(ValueError, match=f"SID code {sizes[0]} out of range"):
        history_prompt(layout, bad)
    with pytest.raises(ValueError, match="codes; the layout has"):
        history_prompt(layout, np.zeros((2, layout.depth + 1), dtype=np.int32))
