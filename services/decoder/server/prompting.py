"""The prompt format of a user history: the one place that defines it.

An item is written as its SID tokens, bracketed when the layout has begin/end tokens:
``[begin] code_0 .. code_{L-1} [end]``. A history is its items oldest first, concatenated, then
one more ``begin`` token (when the layout has one) so the model's next tokens are the codes of
the next item. Training data and the demo must build prompts with these functions too.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def history_prompt(layout: SidLayout, history: Sequence[Sequence[int]]) -> list[int]:
    """Prompt tokens for a history of SIDs (oldest first); may be empty without a begin token."""
    tokens: list[int] = []
    for codes in history:
        tokens += sid_to_tokens(layout, codes)
    if layout.begin_token_id is not None:
        tokens.append(layout.begin_token_id)
    return tokens


def tokens_to_sid(layout: SidLayout, tokens: Sequence[int]) -> tuple[int, ...] | None:
    """SID codes of a generated path (begin/end/EOS tokens skipped); None if incomplete.
    Each level's code is the first token after the previous level's that falls in its range
    (the layout's levels never overlap); run once per beam of every answer, so it tests only
    the level it expects next."""
    levels = layout.levels
    codes: list[int] = []
    for token in tokens:
        if len(codes) == len(levels):
            break
        level = levels[len(codes)]
        offset = int(token) - level.base
        if 0 <= offset < level.size:
            codes.append(offset)
    return tuple(codes) if len(codes) == len(levels) else None
