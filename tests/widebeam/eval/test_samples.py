"""The evaluation inputs: our histories JSONL, RecIF-Bench parquet rows, SIDs in text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.widebeam.eval.recif_files import RecifRow, write_recif
from widebeam.eval.samples import Level, Route, SampleError, load_samples
from widebeam.eval.sid_text import answer_sids, generated_sid


def test_sids_in_text() -> None:
    assert generated_sid("<|sid_begin|><s_a_340><s_b_6566><s_c_5603><|sid_end|>") == "340-6566-5603"
    assert generated_sid("<think>x <s_a_1><s_b_1><s_c_1></think>\n<s_a_2><s_b_3><s_c_4>") == "2-3-4"
    assert generated_sid("<s_b_1><s_a_7><s_b_8> <s_c_9>") == "7-8"  # a run starts at level a
    assert generated_sid("no sid here") is None
    answer = "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|><|sid_begin|><s_a_4><s_b_5><s_c_6>"
    assert answer_sids(answer + "<|sid_end|>" + answer[:45]) == ["1-2-3", "4-5-6"]


def test_histories_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    rows = [
        {"user_id": "u1", "history": ["a", 7], "held_out": "b"},
        {"history": ["c"], "targets": ["d", "e", "d"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    samples, level = load_samples(path, None)
    assert level == Level.ITEM and [s.route for s in samples] == [Route.RECOMMEND] * 2
    assert samples[0].sample_id == "u1" and samples[0].history == ("a", "7")
    assert samples[1].sample_id == "2" and samples[1].targets == ("d", "e")
    assert len(load_samples(path, None, limit=1)[0]) == 1
    with pytest.raises(SampleError, match="--level sid needs RecIF data"):
        load_samples(path, Level.SID)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{", "line 1: invalid JSON"),
        ("[1]", "line 1: expected a JSON object"),
        ('{"history": "a", "held_out": "b"}', "'history' must be a list"),
        ('{"history": ["a"]}', "no 'held_out' item"),
        ('{"history": ["a"], "held_out": "b", "targets": ["c"]}', "not both"),
        ('{"history": [true], "held_out": "b"}', "history holds True"),
        ('{"history": ["a"], "targets": []}', "'targets' is empty"),
    ],
)
def test_bad_histories_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(SampleError, match=message):
        load_samples(path, None)


def test_recif_rows(tmp_path: Path) -> None:
    path = write_recif(tmp_path / "video_test.parquet", [
        RecifRow(history=[(1, 2, 3)], answer=[(4, 5, 6), (7, 0, 1)], answer_pid=[11, 0, 12]),
        RecifRow(history=[(1, 2, 3), (2, 2, 2)], answer=[(3, 3, 3)], answer_pid=[13],
                 pid_as_json_string=True),
        RecifRow(history=[(5, 5, 5)], answer=[(6, 6, 6)], sft_style=True),
    ])  # fmt: skip
    samples, level = load_samples(path, None)
    assert level == Level.SID and all(s.route == Route.CHAT for s in samples)
    assert [s.targets for s in samples] == [("4-5-6", "7-0-1"), ("3-3-3",), ("6-6-6",)]
    first = samples[0].messages or ()
    assert [m["role"] for m in first] == ["system", "user"]
    assert first[1]["content"].endswith("<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>")
    assert [m["role"] for m in samples[2].messages or ()] == ["system", "user"]  # answer dropped
    by_item, level = load_samples(path, Level.ITEM)
    assert level == Level.ITEM
    assert [s.targets for s in by_item] == [("11", "12"), ("13",)]  # no answer_pid: skipped


def test_bad_recif_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"messages": ["[]"]}), path)
    with pytest.raises(SampleError, match="missing \\['metadata'\\]"):
        load_samples(path, None)
    pq.write_table(pa.table({"messages": ["[{"], "metadata": ["{}"]}), path)
    with pytest.raises(SampleError, match="row 0: messages is not valid JSON"):
        load_samples(path, None)
    pq.write_table(pa.table({"messages": ["[]"], "metadata": ["{}"]}), path)
    with pytest.raises(SampleError, match="no samples"):
        load_samples(path, None)
    with pytest.raises(FileNotFoundError):
        load_samples(tmp_path / "missing.parquet", None)
