"""`bench/prefill_tiles.py --smoke`: the prefill kernel's default tiles, with each of its
options, in Triton's interpreter give the fp32 reference's attention with bf16-sized and FP8
K/V (the script's own check)."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.bench.smoke import run_smoke


def test_every_option_matches_the_reference(tmp_path: Path) -> None:
    report, stdout = run_smoke("prefill_tiles.py", tmp_path, timeout=300)
    rows = report["rows"]
    flags = ["".join(f for f, on in zip("STH", o, strict=True) if on) or "-"
             for o in itertools.product((False, True), repeat=3)]  # fmt: skip
    assert [(r["KV"], r["M rows"], r["key block"], r["options"]) for r in rows] == [
        (kv, 64, 64, f) for kv in ("bf16", "fp8") for f in flags
    ]
    assert all(r["check"] == "ok" for r in rows), rows
    assert "| 2x40 | fp8 | 64 | 64 | 4 | 3 | STH |" in stdout
