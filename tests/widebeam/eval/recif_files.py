"""RecIF-Bench parquet files as OpenOneRec's data pipeline writes them (test helper; our code).

The layout follows OpenOneRec's ``data/README.md`` ("Dataset Format Specification": string
columns ``uuid``, ``source``, ``messages`` — a JSON list of ``{"role", "content": [{"type":
"text", "text"}]}`` — and ``metadata``, a JSON object) and its writers
(``data/onerec_data/sft/video_rec.py``: SIDs as ``<|sid_begin|><s_a_{c0}><s_b_{c1}><s_c_{c2}>
<|sid_end|>``, ``json.dumps(..., ensure_ascii=False)``); RecIF-Bench's test rows hold the
system and user turns, with the targets in ``metadata``: ``answer`` (SID text) and
``answer_pid`` (item ids).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SYSTEM_PROMPT = "你是一个智能推荐助手，能够根据用户的浏览历史预测用户可能感兴趣的下一个内容。"
USER_PROMPT = "根据以下用户浏览记录，请预测用户接下来可能观看的内容：\n{query}"


def sid_text(sid: Sequence[int]) -> str:
    return (
        "<|sid_begin|>"
        + "".join(f"<s_{chr(ord('a') + level)}_{code}>" for level, code in enumerate(sid))
        + "<|sid_end|>"
    )


@dataclass(frozen=True)
class RecifRow:
    history: Sequence[Sequence[int]]  # SIDs, oldest first
    answer: Sequence[Sequence[int]]  # target SIDs
    answer_pid: Sequence[int | str] = ()
    pid_as_json_string: bool = False  # RecIF-Bench reads answer_pid as a list or a JSON string
    sft_style: bool = False  # the answer as an assistant turn instead of metadata["answer"]


def _parts(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def write_recif(path: Path, rows: Sequence[RecifRow]) -> Path:
    messages, metadata = [], []
    for row in rows:
        query = "".join(sid_text(s) for s in row.history)
        answer = "".join(sid_text(s) for s in row.answer)
        turns: list[dict[str, Any]] = [
            {"role": "system", "content": _parts(SYSTEM_PROMPT)},
            {"role": "user", "content": _parts(USER_PROMPT.format(query=query))},
        ]
        meta: dict[str, Any] = {"uid": len(messages)}
        if row.sft_style:
            turns.append({"role": "assistant", "content": _parts(answer)})
        else:
            meta["answer"] = answer
        if row.answer_pid:
            pids = list(row.answer_pid)
            meta["answer_pid"] = json.dumps(pids) if row.pid_as_json_string else pids
        messages.append(json.dumps(turns, ensure_ascii=False))
        metadata.append(json.dumps(meta, ensure_ascii=False))
    table = pa.table({
        "uuid": [str(uuid.UUID(int=i)) for i in range(len(rows))],
        "source": ["RecIF_VideoRec"] * len(rows),
        "messages": messages,
        "metadata": metadata,
    })  # fmt: skip
    pq.write_table(table, path)
    return path
