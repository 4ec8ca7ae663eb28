"""validate_table's item id checks (C-level passes, hash-sorted duplicate test) give what the
row-by-row checks give: the same first bad row, the same deduplicated table."""

from __future__ import annotations

import random

import numpy as np
import pytest

from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.validate import validate_table
from widebeam.services.catalog.types import CatalogError


class Sku(str):
    """A str subclass: a valid item id."""


def row_by_row(ids: list[object]) -> tuple[str, object]:
    """("error", first bad row) or ("ok", ids kept after dropping repeats)."""
    for i, item in enumerate(ids):
        if not isinstance(item, str) or not item:
            return "error", i
    seen: set[object] = set()
    kept = [i for i in ids if not (i in seen or seen.add(i))]
    return "ok", kept


@pytest.mark.parametrize("seed", range(60))
def test_matches_row_by_row_checks(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 30)
    pool: list[object] = [f"i{k}" for k in range(rng.randint(1, 2 * n))]
    ids = [rng.choice(pool) for _ in range(n)]
    for _ in range(rng.choice([0, 0, 1, 2])):
        ids[rng.randrange(n)] = rng.choice(["", None, 7, b"x", Sku("s1"), Sku("")])
    # Repeated ids share their SID, so a duplicate is dropped rather than an error.
    sid_of = {item: [hash(item) % 5, 1] for item in ids if isinstance(item, str)}
    sids = np.array([sid_of.get(item, [0, 0]) for item in ids], dtype=np.int64).reshape(n, 2)
    table = CatalogTable(ids, sids, np.zeros(n), format="jsonl", source_rows=np.arange(1, n + 1))  # type: ignore[arg-type]
    outcome, detail = row_by_row(ids)
    if outcome == "error":
        with pytest.raises(
            CatalogError, match=rf"^line {detail + 1}: item id .* is not a non-empty"
        ):
            validate_table(table)
    else:
        assert validate_table(table).item_ids == detail


def test_many_distinct_ids_pass_unchanged() -> None:
    ids = [f"item-{i}" for i in range(100_000)]
    table = CatalogTable(ids, np.zeros((len(ids), 1), dtype=np.int64), np.zeros(len(ids)))
    assert validate_table(table) is table
