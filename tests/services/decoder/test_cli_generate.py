"""`widebeam generate` end to end, as a subprocess: JSONL in, JSONL out in input order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.services.decoder.conftest import SidModel


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "widebeam", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _generate(
    sid_model: SidModel, *flags: str, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """`widebeam generate` over the test model, with its catalog, and `flags`."""
    model = ["--model", str(sid_model.model_dir), "--catalog", str(sid_model.catalog_path)]
    return _run(["generate", *model, *flags], stdin)


def test_generate_jsonl_in_order_with_errors_and_items(sid_model: SidModel, tmp_path: Path) -> None:
    lines = [
        {
            "id": "beam",
            "input_ids": [1, 2, 3],
            "beam_width": 4,
            "n": 2,
            "max_new_tokens": 3,
            "return_logprobs": True,
        },
        "not json",
        {"id": "bad", "input_ids": [1], "beam_width": 2, "n": 3, "max_new_tokens": 2},
        {
            "id": "sid",
            "input_ids": [5, 6],
            "beam_width": 8,
            "n": 3,
            "max_new_tokens": 6,
            "constrained": True,
        },
        {"id": "greedy", "input_ids": [7], "max_new_tokens": 2, "eos_token_id": None},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "out.jsonl"
    proc = _generate(sid_model, "--input", str(src), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("id") for r in rows] == ["beam", None, "bad", "sid", "greedy"]
    assert len(rows[0]["beams"]) == 2 and len(rows[0]["beams"][0]["logprobs"]) == 3
    assert set(rows[0]["beams"][0]) >= {"output_ids", "score", "cum_logprob", "finish_reason"}
    assert "invalid JSON" in rows[1]["error"] and "line 2" in rows[1]["error"]
    assert "n must be" in rows[2]["error"]
    assert len(rows[3]["beams"]) == 3 and all(b["item_ids"] for b in rows[3]["beams"])
    assert len(rows[4]["beams"]) == 1


def test_generate_stdin_stdout_and_explicit_layout(sid_model: SidModel) -> None:
    request = {
        "id": 1,
        "input_ids": [4, 4],
        "beam_width": 2,
        "n": 2,
        "max_new_tokens": 3,
        "constrained": True,
        "eos_token_id": [],
    }
    layout = "203:16,219:16,235:16"  # same codes as the tokenizer, without begin/end tokens
    proc = _generate(sid_model, "--sid-layout", layout, stdin=json.dumps(request))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert row["id"] == "1" and all(len(b["output_ids"]) == 3 for b in row["beams"])


def test_generate_reports_missing_model(tmp_path: Path) -> None:
    proc = _run(["generate", "--model", str(tmp_path / "nope")], "")
    assert proc.returncode == 2 and "error" in proc.stderr


def test_generate_passes_normalization_through(sid_model: SidModel) -> None:
    base = {"input_ids": [5, 6], "beam_width": 8, "n": 8, "max_new_tokens": 6, "constrained": True}
    lines = [
        base | {"id": "vocab"},
        base | {"id": "sid", "normalization": "sid"},
        {"id": "plain", "input_ids": [5], "normalization": "sid"},
        base | {"id": "bogus", "normalization": "softmax"},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    proc = _generate(sid_model, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    vocab, sid, plain, bogus = (json.loads(line) for line in proc.stdout.splitlines())
    by_path = {tuple(b["output_ids"]): b["cum_logprob"] for b in vocab["beams"]}
    shared = [
        (b["cum_logprob"], by_path[p])
        for b in sid["beams"]
        if (p := tuple(b["output_ids"])) in by_path
    ]
    assert shared and all(s >= v - 1e-4 for s, v in shared)
    assert any(s > v + 1e-4 for s, v in shared)  # the field reached the engine
    assert 'normalization "sid" needs a constrained request' in plain["error"]
    assert 'normalization must be "vocab" or "sid", got \'softmax\'' in bogus["error"]
