"""`widebeam eval` against `widebeam up` serving the tiny demo build: its recall@10 is the demo
build's own evaluation, RecIF-Bench parquet rows go through the chat route, and failures are
reported, not scored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from tests.support.child_process import stop_child
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.eval.recif_files import RecifRow, write_recif
from tests.widebeam.stack import start_stack
from widebeam.cli import main

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")
KEY = "eval-secret-key"
RECIF_ROWS = 8  # the first half get the model's own top answer as target, the rest one it lacks


class Demo(NamedTuple):
    root: Path
    gateway: str
    facts: dict[str, Any]  # eval.json
    sid_of: dict[str, tuple[int, ...]]  # item -> SID (catalog.jsonl)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("demo")
    assert main(["demo", "build", "--tiny", "--out", str(root), "--no-progress"]) == 0
    port = free_port()
    proc, log = start_stack(root / "model", root / "catalog.jsonl", port,
                            tmp_path_factory.mktemp("stack"), "--api-key", KEY)  # fmt: skip
    catalog = [json.loads(line) for line in (root / "catalog.jsonl").read_text().splitlines()]
    try:
        yield Demo(root, f"http://127.0.0.1:{port}", json.loads((root / "eval.json").read_text()),
                   {row["item_id"]: tuple(row["sid"]) for row in catalog})  # fmt: skip
    finally:
        stop_child(proc, grace_s=60)
        assert KEY not in log.read_text()


def _eval(demo: Demo, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any] | None]:
    out = tmp_path / "report.json"
    out.unlink(missing_ok=True)
    code = main(["eval", "--url", demo.gateway, "--api-key", KEY, "--no-progress",
                 "--json", str(out), *args])  # fmt: skip
    return code, json.loads(out.read_text()) if out.exists() else None


def test_recall_at_10_is_the_demo_builds(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = demo.facts["eval"]
    constrained = next(r for r in built["rows"] if r["method"].startswith("constrained"))
    k, beam = built["k"], built["beam_width"]
    histories = demo.root / "histories.jsonl"
    code, report = _eval(demo, tmp_path, "--data", str(histories), "--n", str(k),
                         "--beam-width", str(beam), "--concurrency", "4")  # fmt: skip
    assert code == 0 and report is not None
    assert report["samples"] == built["users"] and report["errors"] == 0
    assert report["metrics"][f"recall@{k}"] == constrained["recall"]
    assert report["metrics"][f"ndcg@{k}"] == pytest.approx(constrained["ndcg"], abs=1e-12)
    assert report["metrics"][f"hit@{k}"] == constrained["recall"]  # one held-out item each
    assert report["ks"] == [1, 4, 8, k]
    assert report["route"] == "/v1/recommend" and report["level"] == "item"
    assert report["invalid_rate"] == 0.0 and report["duplicate_rate"] == 0.0
    assert report["qps"] > 0 and report["latency_ms"]["p50"] <= report["latency_ms"]["p99"]
    table = capsys.readouterr().out
    assert f"| {k} | " in table and "QPS" in table and "p99 ms" in table


def _chat_top(demo: Demo, messages: list[dict[str, str]], n: int) -> dict[str, Any]:
    body = {"model": "model", "messages": messages, "n": n, "beam_width": n, "max_tokens": 5,
            "constrained": True}  # fmt: skip
    headers = {"Authorization": f"Bearer {KEY}"}
    reply = httpx.post(f"{demo.gateway}/v1/chat/completions", json=body, headers=headers,
                       timeout=120)  # fmt: skip
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]


def test_recif_parquet_through_the_chat_route(demo: Demo, tmp_path: Path) -> None:
    from widebeam.eval.samples import load_samples

    histories = [
        json.loads(line) for line in (demo.root / "histories.jsonl").read_text().splitlines()
    ]
    absent = next((a, b, c) for a in range(8) for b in range(8) for c in range(8)
                  if (a, b, c) not in set(demo.sid_of.values()))  # fmt: skip
    rows = [
        RecifRow(
            history=[demo.sid_of[i] for i in h["history"]],
            answer=[absent],
            answer_pid=["not-an-item"],
        )
        for h in histories[:RECIF_ROWS]
    ]
    path = write_recif(tmp_path / "video_test.parquet", rows)
    n = 8
    samples, _ = load_samples(path, None)
    for i, sample in enumerate(samples[: RECIF_ROWS // 2]):  # the model's own top answers
        top = _chat_top(demo, list(sample.messages or ()), n)
        rows[i] = RecifRow(history=rows[i].history, answer=[_codes(top["message"]["content"])],
                           answer_pid=[top["item_ids"][0]])  # fmt: skip
    write_recif(path, rows)

    code, by_sid = _eval(demo, tmp_path, "--data", str(path), "--n", str(n), "--concurrency", "2")
    assert code == 0 and by_sid is not None
    assert by_sid["route"] == "/v1/chat/completions" and by_sid["level"] == "sid"
    assert by_sid["samples"] == RECIF_ROWS and by_sid["ks"] == [1, 4, 8]
    assert by_sid["metrics"]["hit@1"] == 0.5 and by_sid["metrics"]["mrr@8"] == 0.5
    assert by_sid["invalid_rate"] == 0.0 and by_sid["duplicate_rate"] == 0.0  # the trie's doing

    code, by_item = _eval(demo, tmp_path, "--data", str(path), "--n", str(n), "--level", "item")
    assert code == 0 and by_item is not None
    assert by_item["metrics"]["hit@1"] == 0.5 and by_item["metrics"]["recall@1"] == 0.5

    code, free = _eval(demo, tmp_path, "--data", str(path), "--n", str(n), "--unconstrained")
    assert code == 0 and free is not None and free["samples"] == RECIF_ROWS
    assert 0.0 <= free["invalid_rate"] <= 1.0 and 0.0 <= free["duplicate_rate"] <= 1.0


def _codes(text: str) -> tuple[int, ...]:
    from widebeam.eval.sid_text import codes_in

    codes = codes_in(text)
    assert codes is not None, text
    return codes


def test_failures_are_reported_not_scored(
    demo: Demo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "h.jsonl"
    known = next(iter(demo.sid_of))
    rows = [
        {"history": [known], "held_out": known},
        {"history": ["no-such-item"], "held_out": known},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    code, report = _eval(demo, tmp_path, "--data", str(path), "--n", "4")
    assert code == 1 and report is not None
    assert report["samples"] == 1 and report["errors"] == 1
    assert "400" in report["first_errors"][0] and "no-such-item" in report["first_errors"][0]
    assert "no-such-item" in capsys.readouterr().err

    code, report = _eval(demo, tmp_path, "--data", str(path), "--n", "4", "--max-errors", "0")
    assert code == 1 and report is None
    assert "more than --max-errors 0" in capsys.readouterr().err

    assert main(["eval", "--url", demo.gateway, "--data", str(path), "--n", "8",
                 "--beam-width", "4"]) == 2  # fmt: skip
    assert "--n must be in 1..--beam-width (4)" in capsys.readouterr().err
    code = main(["eval", "--url", demo.gateway, "--data", str(path), "--no-progress"])
    assert code == 1 and "401" in capsys.readouterr().err  # no key
