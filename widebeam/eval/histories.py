"""Our JSONL of item histories, one sample per line, as `widebeam demo build` writes
``histories.jsonl``::

    {"user_id": "user-00003", "history": ["item-0077", "item-0178"], "held_out": "item-0162"}

``history``: item ids (strings or integers), oldest first. Targets: ``held_out`` (one item) or
``targets`` (a list, in relevance order). ``user_id`` names the sample (default: the line number).
Blank lines are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from widebeam.eval.samples import EvalSample, SampleError


def read_histories(path: Path, limit: int | None = None) -> list[EvalSample]:
    samples: list[EvalSample] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if limit is not None and len(samples) >= limit:
                break
            if line.strip():
                samples.append(_sample(line, f"{path.name} line {number}", str(number)))
    return samples


def _sample(line: str, where: str, default_id: str) -> EvalSample:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise SampleError(f"{where}: invalid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise SampleError(f"{where}: expected a JSON object, got {type(row).__name__}")
    history = row.get("history")
    if not isinstance(history, list):
        raise SampleError(f"{where}: 'history' must be a list of item ids")
    if "held_out" in row and "targets" in row:
        raise SampleError(f"{where}: give 'held_out' or 'targets', not both")
    if "held_out" in row:
        targets = [row["held_out"]]
    elif isinstance(row.get("targets"), list):
        targets = row["targets"]
    else:
        raise SampleError(f"{where}: no 'held_out' item (or 'targets' list)")
    if not targets:
        raise SampleError(f"{where}: 'targets' is empty")
    return EvalSample(
        sample_id=str(row.get("user_id", default_id)),
        targets=tuple(dict.fromkeys(_item(t, where, "targets") for t in targets)),
        history=tuple(_item(h, where, "history") for h in history),
    )


def _item(value: Any, where: str, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise SampleError(f"{where}: {field} holds {value!r:.60}, not an item id")
    return str(value)
