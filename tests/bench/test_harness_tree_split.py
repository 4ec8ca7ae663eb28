"""`bench/harness.make_engine(tree_split=...)`: the bench's shared-suffix split rule reaches the
Triton backend the engine built, and is refused with a clear message on any other backend."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.smoke import load_bench_module
from widebeam.kernels.attention.factory import triton_available
from widebeam.kernels.attention.suffix_tree import DEFAULT_SPLIT, SplitRule
from widebeam.services.decoder.testing.tiny_model import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny"), base_vocab=100, seed=0)


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    """make_engine freezes the collector's view (as the server does); give this process back."""
    yield
    gc.unfreeze()


def test_tree_split_refused_without_triton(tiny: Path) -> None:
    harness = load_bench_module("harness")
    with pytest.raises(SystemExit, match="needs the triton backend, not torch"):
        harness.make_engine(tiny, 8, 4096, dtype="float32", attention_backend="torch",
                            tree_split="4:4")  # fmt: skip


def test_tree_split_reaches_the_triton_backend(tiny: Path) -> None:
    # Asked here, not in a skipif at collection: importing triton before tests/kernels'
    # conftest sets TRITON_INTERPRET would decorate triton.language for the GPU in this worker.
    if not triton_available():
        pytest.skip("triton is not installed")
    harness = load_bench_module("harness")
    engine = harness.make_engine(
        tiny, 8, 4096, dtype="float32", attention_backend="triton", tree_split="4:4"
    )
    assert engine.runner.backend.tree_split == SplitRule(4, 4) != DEFAULT_SPLIT
