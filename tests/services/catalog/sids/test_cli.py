"""`widebeam catalog build-sids`: .npy and Parquet in, a native JSONL catalog out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from widebeam.cli import main
from widebeam.services.catalog.formats.jsonl_table import parse_jsonl


def embeddings(n: int = 300, dim: int = 8) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)


def read_catalog(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_npy_round_trip_with_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = embeddings()
    np.save(tmp_path / "emb.npy", emb)
    (tmp_path / "ids.txt").write_text("".join(f"sku-{i}\n" for i in range(300)))
    out = tmp_path / "catalog.jsonl"
    files = ["--embeddings", str(tmp_path / "emb.npy"), "--ids", str(tmp_path / "ids.txt")]
    argv = ["catalog", "build-sids", *files, "--levels", "2", "--codebook-size", "32", "--out"]
    argv.append(str(out))
    assert main(argv) == 0
    rows = read_catalog(out)
    assert [r["item_id"] for r in rows] == [f"sku-{i}" for i in range(300)]
    assert all(len(r["sid"]) == 2 and max(r["sid"]) < 32 for r in rows)
    assert "300 distinct SIDs" in capsys.readouterr().err
    with out.open("rb") as fh:  # the catalog service's own parser accepts it
        assert parse_jsonl(fh).num_items == 300
    # Same seed, same catalog.
    again = tmp_path / "again.jsonl"
    assert main([*argv[:-1], str(again)]) == 0
    assert again.read_text() == out.read_text()


def test_npy_without_ids_uses_row_numbers_and_stdout(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:  # fmt: skip
    np.save(tmp_path / "emb.npy", embeddings(20))
    argv = ["catalog", "build-sids", "--embeddings", str(tmp_path / "emb.npy"),
            "--codebook-sizes", "4,8"]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["item_id"] for r in rows] == [str(i) for i in range(20)]
    assert all(r["sid"][0] < 4 and r["sid"][1] < 8 for r in rows)


@pytest.mark.parametrize("layout", ["list", "columns"])
def test_parquet(tmp_path: Path, layout: str) -> None:
    emb = embeddings(50, 4)
    cols: dict[str, object] = {"item_id": [f"p{i}" for i in range(50)], "title": ["x"] * 50}
    if layout == "list":
        cols["vec"] = pa.array(emb.tolist(), type=pa.list_(pa.float32()))
    else:
        cols.update({f"emb_{d}": emb[:, d] for d in range(4)})
    pq.write_table(pa.table(cols), tmp_path / "emb.parquet")
    out = tmp_path / "c.jsonl"
    argv = ["catalog", "build-sids", "--embeddings", str(tmp_path / "emb.parquet"),
            "--levels", "3", "--codebook-size", "8", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = read_catalog(out)
    assert [r["item_id"] for r in rows] == [f"p{i}" for i in range(50)]
    assert len({tuple(r["sid"]) for r in rows}) == 50


def _bad_npy(tmp_path: Path) -> list[str]:
    np.save(tmp_path / "e.npy", np.zeros(5, np.float32))
    return ["--embeddings", str(tmp_path / "e.npy")]


def _ids_mismatch(tmp_path: Path) -> list[str]:
    np.save(tmp_path / "e.npy", embeddings(5))
    (tmp_path / "ids.txt").write_text("a\nb\n")
    return ["--embeddings", str(tmp_path / "e.npy"), "--ids", str(tmp_path / "ids.txt")]


def _duplicate_ids(tmp_path: Path) -> list[str]:
    np.save(tmp_path / "e.npy", embeddings(3))
    (tmp_path / "ids.txt").write_text("a\nb\na\n")
    return ["--embeddings", str(tmp_path / "e.npy"), "--ids", str(tmp_path / "ids.txt")]


def _no_embedding_column(tmp_path: Path) -> list[str]:
    pq.write_table(pa.table({"item_id": ["a"], "x": [1.0]}), tmp_path / "e.parquet")
    return ["--embeddings", str(tmp_path / "e.parquet")]


def _ragged(tmp_path: Path) -> list[str]:
    pq.write_table(pa.table({"item_id": ["a", "b"], "embedding": [[1.0, 2.0], [1.0]]}),
                   tmp_path / "e.parquet")  # fmt: skip
    return ["--embeddings", str(tmp_path / "e.parquet")]


def _nan(tmp_path: Path) -> list[str]:
    np.save(tmp_path / "e.npy", np.array([[1.0, np.nan]], np.float32))
    return ["--embeddings", str(tmp_path / "e.npy")]


@pytest.mark.parametrize(
    "make, message",
    [
        (_bad_npy, "2-D"),
        (_ids_mismatch, "2 ids for 5 embedding rows"),
        (_duplicate_ids, "'a' appears more than once"),
        (_no_embedding_column, "no embedding found"),
        (_ragged, "same non-zero length"),
        (_nan, "NaN"),
        (lambda p: ["--embeddings", str(p / "missing.npy")], "does not exist"),
        (lambda p: ["--embeddings", str(p / "x.csv")], "does not exist"),
    ],
)
def test_bad_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str], make, message: str) -> None:  # type: ignore[no-untyped-def]
    assert main(["catalog", "build-sids", *make(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_unsupported_suffix_and_bad_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "x.csv").write_text("1,2\n")
    assert main(["catalog", "build-sids", "--embeddings", str(tmp_path / "x.csv")]) == 2
    assert "unsupported embeddings file type '.csv'" in capsys.readouterr().err
    np.save(tmp_path / "e.npy", embeddings(5))
    argv = ["catalog", "build-sids", "--embeddings", str(tmp_path / "e.npy")]
    assert main([*argv, "--codebook-sizes", "4,x"]) == 2
    assert "--codebook-sizes" in capsys.readouterr().err
    assert main([*argv, "--levels", "0"]) == 2
    assert "--levels" in capsys.readouterr().err
