"""`bench/recif_throughput.py`'s prompts: one per key, the rehearsal's negative keys included."""

from __future__ import annotations

from tests.bench.smoke import load_bench_module
from widebeam.services.catalog.sid_layout import SidLayout

LAYOUT = SidLayout.parse("100:16,116:16,132:16;begin=98;end=99")
SIDS = [(a, b, c) for a in range(16) for b in range(0, 16, 5) for c in range(0, 16, 7)]


def test_negative_keys_make_prompts_of_their_own() -> None:
    """The rehearsal sends keys below zero (harness.REHEARSAL_IDS); random.Random seeds with a
    key's absolute value, so without keys of their own the rehearsal of n = 50 (keys -50,000 -
    i) sent the timed phase's prompts (50,000 + i) and warmed the prefix cache for it."""
    recif = load_bench_module("recif_throughput")
    harness = load_bench_module("harness")
    prompts = recif.w4_prompts(LAYOUT, recif.SMOKE, SIDS, 90, shared=False)
    for width in recif.FULL_WIDTHS:
        timed = {prompts(1000 * width + i) for i in range(8)}
        rehearsed = {prompts(1000 * width + harness.REHEARSAL_IDS - i) for i in range(8)}
        assert len(timed) == len(rehearsed) == 8 and not timed & rehearsed, width
    assert prompts(7) == prompts(7)  # a key's prompt is the same each time


def test_shared_prompts_start_with_the_instruction_and_end_with_begin() -> None:
    recif = load_bench_module("recif_throughput")
    shape = recif.SMOKE
    shared = recif.w4_prompts(LAYOUT, shape, SIDS, 90, shared=True)
    distinct = recif.w4_prompts(LAYOUT, shape, SIDS, 90, shared=False)
    a, b = shared(1), shared(2)
    assert a[: shape.shared_tokens] == b[: shape.shared_tokens] and a != b
    assert distinct(1)[: shape.shared_tokens] != distinct(2)[: shape.shared_tokens]
    items = shape.history_items * (len(LAYOUT.levels) + 2)
    assert len(a) == shape.text_tokens + items + 1 and a[-1] == LAYOUT.begin_token_id
