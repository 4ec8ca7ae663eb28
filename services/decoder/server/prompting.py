"""The prompt format of a user history: the one place that defines it.

An item is written as its SID tokens, bracketed when the layout has begin/end tokens:
``[begin] code_0 .. code_{L-1} [end]``. A history is its items oldest first, concatenated, then
one more ``begin`` token (when the layout has one) so the model's next tokens are the codes of
the next item. Training data and the demo must build prompts with these functions too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout


def sid_to_tokens(layout: SidLayout, codes: Sequence[int]) -> list[int]:
    """Tokens of one item; ValueError when ``codes`` does not fit the layout."""
    if len(codes) != layout.depth:
        raise ValueError(f"SID {list(codes)} has {len(codes)} codes; the layout has {layout.depth}")
    tokens = [] if layout.begin_token_id is None else [layout.begin_token_id]
    tokens += [layout.code_to_token(level, int(code)) for level, code in enumerate(codes)]
    if layout.end_token_id is not None:
        tokens.append(layout.end_token_id)
    return tokens


def history_prompt(
    layout: SidLayout,
    history: Sequence[Sequence[int]] | np.ndarray,  # or [items, L] integers (resolved ids)
) -> list[int]:
    """Prompt tokens for a history of SIDs (oldest first); may be empty without a begin token."""
    if isinstance(history, np.ndarray):
        tokens = _array_prompt(layout, history)
        if tokens is not None:
            return tokens
        history = [tuple(codes) for codes in history.tolist()]  # to raise `sid_to_tokens`' error
    tokens: list[int] = []
    for codes in history:
        tokens += sid_to_tokens(layout, codes)
    if layout.begin_token_id is not None:
        tokens.append(layout.begin_token_id)
    return tokens


def _array_prompt(
    layout: SidLayout,
    history: np.ndarray,  # [items, L] integers
) -> list[int] | None:
    """`history_prompt` of a whole array at once; None when some SID does not fit the layout
    (whose error the per-item path raises)."""
    levels = layout.levels
    if history.dtype.kind not in "iu" or history.ndim != 2 or history.shape[1] != len(levels):
        return None
    sizes = np.array([lv.size for lv in levels], dtype=np.int64)  # [L]
    if ((history < 0) | (history >= sizes)).any():
        return None
    begin, end = layout.begin_token_id, layout.end_token_id
    first = int(begin is not None)
    width = first + len(levels) + int(end is not None)
    item_tokens = np.empty((len(history), width), dtype=np.int64)  # [items, tokens an item]
    item_tokens[:, first : first + len(levels)] = history
    item_tokens[:, first : first + len(levels)] += [lv.base for lv in levels]
    if begin is not None:
        item_tokens[:, 0] = begin
    if end is not None:
        item_tokens[:, -1] = end
    tokens = item_tokens.ravel().tolist()
    if begin is not None:
        tokens.append(begin)
    return tokens


def tokens_to_sid(layout: SidLayout, tokens: Sequence[int]) -> tuple[int, ...] | None:
    """SID codes of a generated path (begin/end/EOS tokens skipped); None if incomplete.
    Each level's code is the first token after the previous level's that falls in its range
    (the layout's levels never overlap)."""
    return sid_of_tokens(level_bounds(layout), tokens)


def level_bounds(layout: SidLayout) -> tuple[tuple[int, int], ...]:
    """(base, size) of each level: what `sid_of_tokens` reads, taken once per answer."""
    return tuple((lv.base, lv.size) for lv in layout.levels)


def sid_of_tokens(
    bounds: tuple[tuple[int, int], ...], tokens: Sequence[int]
) -> tuple[int, ...] | None:
    """`tokens_to_sid` with the layout's `level_bounds`: run once per beam of every answer, so
    it tests only the level it expects next."""
    codes: list[int] = []
    base, size = bounds[0]
    for token in tokens:
        offset = int(token) - base
        if 0 <= offset < size:
            codes.append(offset)
            if len(codes) == len(bounds):
                return tuple(codes)
            base, size = bounds[len(codes)]
    return None
