"""`bench/w3_prompts.py`: workload 3's prompt, the one shape the W3 benches send."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.smoke import load_bench_module
from widebeam.services.catalog.sid_layout import SidLayout


def test_a_prompt_is_sixty_catalog_items_then_begin(tmp_path: Path) -> None:
    prompts = load_bench_module("w3_prompts")
    layout = SidLayout.parse("100:8,108:8,116:8;begin=98;end=99")
    sids = [(a, b, c) for a in range(8) for b in range(8) for c in range(0, 8, 3)]
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(
        "".join(json.dumps({"item": str(i), "sid": s}) + "\n" for i, s in enumerate(sids))
    )
    assert prompts.catalog_sids(catalog) == sids
    make = prompts.HistoryPrompts(layout, sids, seed=3)
    first, second = make(), make()
    assert len(first) == prompts.HISTORY_ITEMS * 5 + 1 == 301
    begin, end = layout.begin_token_id, layout.end_token_id
    assert first[-1] == begin
    items = [first[i : i + 5] for i in range(0, 300, 5)]
    bases = [level.base for level in layout.levels]
    history = []
    for item in items:
        assert item[0] == begin and item[4] == end
        history.append(tuple(t - b for t, b in zip(item[1:4], bases, strict=True)))
    assert set(history) <= set(sids) and len(set(history)) == 60  # distinct catalog items
    assert first != second  # a new history each call
    assert prompts.HistoryPrompts(layout, sids, seed=3)() == first  # the same for the seed
