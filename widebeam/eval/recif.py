"""RecIF-Bench rows (OpenOneRec's benchmark parquet) as evaluation samples.

The format RecIF-Bench's loader reads (``BaseLoader`` in
``benchmarks/benchmark/tasks/v1_0/base_loader.py`` and the recommendation evaluator of
Kuaishou-OneRec/OpenOneRec): a parquet with a ``messages`` column — a JSON string (or list) of
``{"role", "content"}`` turns, content a string or a list of ``{"type": "text", "text"}`` parts,
joined without separator — and a ``metadata`` column, a JSON string (or struct) holding the
targets: ``answer``, the target items' SIDs as text (``<|sid_begin|><s_a_1><s_b_2><s_c_3>
<|sid_end|>...``), and ``answer_pid`` (videos) or ``answer_iid`` (products), their item ids (a
list or a JSON string of one; ``0`` means none). Trailing assistant turns are dropped from the
prompt; when ``answer`` is missing (SFT-style rows), the last assistant turn is the answer.
Rows with no messages or no targets are skipped, as RecIF-Bench skips them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from widebeam.eval.samples import EvalSample, Level, SampleError
from widebeam.eval.sid_text import answer_sids

ITEM_ANSWER_KEYS = ("answer_pid", "answer_iid")
_BATCH_ROWS = 1024


def read_recif(path: Path, level: Level, limit: int | None = None) -> list[EvalSample]:
    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise SampleError(f"{path}: not a readable parquet file ({exc})") from None
    missing = {"messages", "metadata"} - set(parquet.schema_arrow.names)
    if missing:
        raise SampleError(
            f"{path}: a RecIF parquet needs columns 'messages' and 'metadata'; missing "
            f"{sorted(missing)} (found {parquet.schema_arrow.names})"
        )
    samples: list[EvalSample] = []
    row = 0
    for batch in parquet.iter_batches(_BATCH_ROWS, columns=["messages", "metadata"]):
        for messages, metadata in zip(*(c.to_pylist() for c in batch.columns), strict=True):
            if limit is not None and len(samples) >= limit:
                return samples
            sample = _sample(messages, metadata, level, f"{path.name} row {row}", str(row))
            if sample is not None:
                samples.append(sample)
            row += 1
    return samples


def _sample(
    messages_raw: Any, metadata_raw: Any, level: Level, where: str, sample_id: str
) -> EvalSample | None:
    turns = [_turn(t, where) for t in _decoded(messages_raw, list, where, "messages")]
    metadata = _decoded(metadata_raw, dict, where, "metadata")
    answer = metadata.get("answer")
    while turns and turns[-1]["role"] == "assistant":
        last = turns.pop()
        if answer is None:
            answer = last["content"]
    if level == Level.SID:
        targets = answer_sids(str(answer)) if answer is not None else []
    else:
        targets = _item_answers(metadata, where)
    if not turns or not targets:
        return None
    return EvalSample(sample_id=sample_id, targets=tuple(targets), messages=tuple(turns))


def _decoded(value: Any, kind: type, where: str, column: str) -> Any:
    if value is None:
        return kind()
    if isinstance(value, str):
        if not value.strip():
            return kind()
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise SampleError(f"{where}: {column} is not valid JSON ({exc})") from None
    if not isinstance(value, kind):
        raise SampleError(f"{where}: {column} must be a JSON {kind.__name__}, got {value!r:.80}")
    return value


def _turn(turn: Any, where: str) -> dict[str, str]:
    if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
        raise SampleError(f"{where}: a message must be an object with a 'role', got {turn!r:.80}")
    content = turn.get("content")
    if isinstance(content, list):
        content = "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    if not isinstance(content, str):
        raise SampleError(f"{where}: message content must be text, got {content!r:.80}")
    return {"role": turn["role"], "content": content}


def _item_answers(metadata: dict[str, Any], where: str) -> list[str]:
    key = next((k for k in ITEM_ANSWER_KEYS if metadata.get(k) is not None), None)
    if key is None:
        return []
    value = _decoded(metadata[key], list, where, f"metadata.{key}")
    ids = [str(v) for v in value if not isinstance(v, bool) and v not in (0, "0", "", None)]
    return list(dict.fromkeys(ids))
