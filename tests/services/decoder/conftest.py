"""A tiny Qwen3 checkpoint with SID tokens and a catalog over them, shared by engine tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

SID_LEVELS = (16, 16, 16)


class SidModel(NamedTuple):
    model_dir: Path
    catalog_path: Path
    catalog: list[tuple[str, tuple[int, ...]]]

    def engine_config(self, **overrides: Any) -> EngineConfig:
        """This model with its catalog as the default one; `overrides` set the other fields."""
        fields = {"model_dir": str(self.model_dir), "catalog_path": str(self.catalog_path)}
        return EngineConfig(**(fields | overrides))

    def engine(self, **overrides: Any) -> Engine:
        return Engine(self.engine_config(**overrides))


def write_catalog(path: Path, num_items: int, levels: tuple[int, ...], seed: int) -> list:
    rng = random.Random(seed)
    entries = []
    with path.open("w") as fh:
        for i in range(num_items):
            sid = tuple(rng.randrange(size) for size in levels)
            entries.append((f"item-{i}", sid))
            fh.write(json.dumps({"item_id": f"item-{i}", "sid": list(sid)}) + "\n")
    return entries


@pytest.fixture(scope="session")
def sid_model(tmp_path_factory: pytest.TempPathFactory) -> SidModel:
    root = tmp_path_factory.mktemp("sid_model")
    model_dir = write_tiny_model(root / "model", sid_levels=SID_LEVELS, base_vocab=200, seed=7)
    catalog_path = root / "catalog.jsonl"
    entries = write_catalog(catalog_path, 300, SID_LEVELS, seed=11)
    return SidModel(model_dir, catalog_path, entries)
