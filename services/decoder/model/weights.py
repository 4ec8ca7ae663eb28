"""Loading HF ``*.safetensors`` checkpoints (single file or sharded with an index)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """The checkpoint on disk does not match what the model expects."""


def checkpoint_files(path: str | Path) -> dict[Path, list[str] | None]:
    """Map each weight file to the tensor names the index assigns it (None: read all).

    Preference follows HF: the sharded index, then ``model.safetensors``, then any
    ``*.safetensors`` files (some repos name their single file differently).
    """
    root = Path(path)
    if root.is_file():
        return {root: None}
    if not root.is_dir():
        raise FileNotFoundError(f"model directory {root} does not exist")
    index = root / INDEX_FILE
    if index.is_file():
        return _files_from_index(index)
    if (root / SINGLE_FILE).is_file():
        return {root / SINGLE_FILE: None}
    found = sorted(root.glob("*.safetensors"))
    if not found:
        present = sorted(p.name for p in root.iterdir())
        raise FileNotFoundError(
            f"no {SINGLE_FILE}, {INDEX_FILE} or *.safetensors in {root} (found: {present})"
        )
    return {p: None for p in found}


def _files_from_index(index: Path) -> dict[Path, list[str] | None]:
    with index.open() as fh:
        weight_map = json.load(fh).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index} has no 'weight_map'")
    by_file: dict[Path, list[str] | None] = {}
    for name, shard in weight_map.items():
        names = by_file.setdefault(index.parent / shard, [])
        assert names is not None
        names.append(name)
    missing = [p.name for p in by_file if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{index} names shard files that do not exist: {sorted(missing)}")
    return by_file


def load_state_dict(
    path: str | Path,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """Read every tensor of a checkpoint directory (or one file).

    Floating tensors are cast to ``dtype`` when given; integer tensors keep theirs.
    """
    state: dict[str, torch.Tensor] = {}
    dev = str(torch.device(device))
    for file, names in checkpoint_files(path).items():
        with safe_open(str(file), framework="pt", device=dev) as fh:
            available = set(fh.keys())
            wanted = sorted(available) if names is None else names
            absent = [n for n in wanted if n not in available]
            if absent:
                raise CheckpointError(
                    f"index assigns {_preview(absent)} to {file.name}, which lacks them"
                )
            for name in wanted:
                if name in state:
                    raise CheckpointError(f"tensor {name!r} appears in more than one file")
                tensor = fh.get_tensor(name)
                if dtype is not None and tensor.is_floating_point():
                    tensor = tensor.to(dtype)
                state[name] = tensor
    return state


def validate_state_dict(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Size],
    *,
    optional: Iterable[str] = (),
) -> None:
    """Raise CheckpointError listing missing, unexpected and wrongly shaped tensors."""
    optional_set = set(optional)
    missing = sorted(set(expected) - set(state) - optional_set)
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(
        f"{n}: checkpoint {tuple(state[n].shape)} vs model {tuple(expected[n])}"
        for n in set(state) & set(expected)
        if state[n].shape != expected[n]
    )
    problems = []
    if missing:
        problems.append(f"missing tensors {_preview(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_preview(unexpected)}")
    if wrong:
        problems.append(f"shape mismatches {_preview(wrong)}")
    if problems:
        raise CheckpointError("checkpoint does not match the model config: " + "; ".join(problems))


def _preview(items: list[str], limit: int = 8) -> str:
    more = f" ... (+{len(items) - limit} more)" if len(items) > limit else ""
    return "[" + ", ".join(items[:limit]) + "]" + more
