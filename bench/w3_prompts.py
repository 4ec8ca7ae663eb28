"""Workload 3's prompts: a user's history of catalog items as SID tokens, then the begin token
the constrained decode starts from. One place for the shape every W3-based bench sends."""

from __future__ import annotations

import json
import random
from pathlib import Path

from widebeam.services.catalog.sid_layout import SidLayout

HISTORY_ITEMS = 60  # x 5 tokens ([begin] a b c [end]) + the final begin = 301 tokens


def catalog_sids(catalog: Path) -> list[tuple[int, ...]]:
    """Every item's SID codes of a catalog file (JSON lines with a "sid" list)."""
    with catalog.open() as lines:
        return [tuple(json.loads(line)["sid"]) for line in lines]


class HistoryPrompts:
    """Each call a new prompt: HISTORY_ITEMS random items of `sids` (each [begin] its codes as
    the layout's tokens [end]), then [begin]; the same sequence of prompts for the same seed."""

    def __init__(self, layout: SidLayout, sids: list[tuple[int, ...]], seed: int = 0) -> None:
        self.sids = sids
        self.bases = [level.base for level in layout.levels]
        self.begin, self.end = layout.begin_token_id, layout.end_token_id
        self.rng = random.Random(seed)

    def __call__(self) -> tuple[int, ...]:
        ids: list[int] = []
        for sid in self.rng.sample(self.sids, HISTORY_ITEMS):
            ids += [self.begin, *(b + c for b, c in zip(self.bases, sid, strict=True)), self.end]
        return (*ids, self.begin)
