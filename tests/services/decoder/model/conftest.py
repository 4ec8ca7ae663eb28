"""Shared tiny-model directories (built once per session; writing is cheap but not free)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from widebeam.services.decoder.testing.tiny_model import write_tiny_model

TinyFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> TinyFactory:
    """``tiny_model_dir(**write_tiny_model_kwargs)`` -> a cached model directory."""
    cache: dict[tuple[tuple[str, Any], ...], Path] = {}

    def make(**kwargs: Any) -> Path:
        key = tuple(sorted(kwargs.items()))
        if key not in cache:
            cache[key] = write_tiny_model(tmp_path_factory.mktemp("tiny"), **kwargs)
        return cache[key]

    return make
