"""`bench/gateway_json.py --smoke`: both renderings of each answer are timed (the bench itself
checks they give the same JSON); no time is asserted (it depends on the machine)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_gateway_json_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("gateway_json.py", tmp_path, timeout=300)
    rows = [(r["answer"], r["n"]) for r in report["rows"]]
    assert rows == [("chat", 4), ("chat", 64), ("recommend", 4), ("recommend", 64)]
    for row in report["rows"]:
        assert row["fastapi_ms"] > 0 and row["plain_json_ms"] > 0 and row["bytes"] > 0
    assert report["rows"][1]["bytes"] > report["rows"][0]["bytes"]  # the answer grows with n
    assert "| chat | 64 |" in stdout
