"""One catalog pipeline: the same file served as the decoder's catalog file (`--catalog`) and
uploaded with `widebeam catalog upload` (catalog service -> Redis -> the decoder's subscriber)
gives the same items in the same order, in every format the catalog service takes."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import empty_pb2

from tests.reliability.support import CatalogApp
from tests.services.catalog.formats import catalog_writers as cw
from tests.services.decoder.conftest import SID_LEVELS, SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
from widebeam.cli import main
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogError
from widebeam.services.decoder.catalog_loading import load_catalog_constraint
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

Writer = Callable[[list[cw.Row]], bytes]
# case -> (the format the service reports, the file's bytes for some rows)
WRITERS: dict[str, tuple[str, Writer]] = {
    "jsonl": ("jsonl", lambda rows: cw.jsonl(rows=rows)),
    "jsonl-gzip": ("jsonl", lambda rows: cw.gz(cw.jsonl(levels=True, rows=rows))),
    "csv": ("csv", lambda rows: cw.csv_bytes("comma", rows=rows)),
    "parquet": ("parquet", lambda rows: cw.parquet(rows=rows)),
    "flashrec": ("flashrec", lambda rows: cw.flashrec(rows=rows)),
    "sid2pid": ("sid2pid", lambda rows: cw.sid2pid(rows=rows)),
}
ITEMS_PER_SID = 3


def item_name(k: int, j: int) -> str:
    return f"{1000 + 10 * k + j}" if k % 2 else f"p{k}-{j}"


@pytest.fixture(scope="module")
def rows() -> list[cw.Row]:
    """40 SIDs of 3 items each, shuffled, popularity unlike file order (ties included); some ids
    are all digits, which FlashRec and sid2pid files hold as JSON integers."""
    assert SID_LEVELS == (cw.C,) * 3  # sid2pid packs with cw.C
    rng = random.Random(23)
    sids = rng.sample([(a, b, c) for a in range(16) for b in range(16) for c in range(16)], 40)
    popularity = [0.0, 1.0, 4.0, 9.0]
    out = [
        (item_name(k, j), sid, rng.choice(popularity), f"title {k}-{j}")
        for k, sid in enumerate(sids)
        for j in range(ITEMS_PER_SID)
    ]
    rng.shuffle(out)
    return out


def artifact_order(rows: list[cw.Row], popularity: bool) -> dict[tuple[int, ...], list[str]]:
    """SID -> items as docs/catalog.md states: popularity descending, ties in file order."""
    keyed = sorted(enumerate(rows), key=lambda r: (-r[1][2], r[0]) if popularity else r[0])
    out: dict[tuple[int, ...], list[str]] = {}
    for _, (item, sid, _, _) in keyed:
        out.setdefault(sid, []).append(item)
    return out


@pytest.fixture
def catalog_service(redis_url: str) -> Iterator[CatalogApp]:
    with CatalogApp(CatalogSettings(redis_url=redis_url, port=0)) as app:
        yield app


@pytest.mark.parametrize("case", list(WRITERS))
def test_file_and_redis_serve_the_same_items_in_the_same_order(
    case: str,
    sid_model: SidModel,
    rows: list[cw.Row],
    tmp_path: Path,
    redis_url: str,
    catalog_service: CatalogApp,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fmt, write = WRITERS[case]
    path = tmp_path / "catalog.bin"  # the name says nothing: both sides detect the format
    path.write_bytes(write(rows))
    code = main(["catalog", "upload", str(path), "--name", "shop", "--url", catalog_service.url,
                 "--model", str(sid_model.model_dir), "--no-progress"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["format"] == fmt

    expected = artifact_order(rows, popularity=fmt != "flashrec")  # FlashRec has no popularity
    if fmt != "flashrec":  # so that file order would fail this test
        assert expected != artifact_order(rows, popularity=False)
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None
    file_trie = load_catalog_constraint(path, layout, "cpu").trie
    for sid, items in expected.items():
        codes = ",".join(map(str, sid))
        published = httpx.get(f"{catalog_service.url}/v1/catalogs/shop/sids/{codes}")
        assert published.json()["item_ids"] == items == file_trie.lookup_sid(list(sid))

    settings = make_settings(
        sid_model, catalog_file=str(path), redis_url=redis_url, catalogs=["shop"]
    )
    with BackgroundServer(settings) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.DecoderStub(channel)

        def served() -> dict[str, tuple[int, int]]:
            info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
            return {c.name: (c.num_items, c.num_sids) for c in info.catalogs}

        wait_until(lambda: "shop" in served(), 120.0, "the published catalog")
        sizes = (len(rows), len(expected))
        assert served() == {"default": sizes, "shop": sizes}
        histories = [rows[:1], rows[5:9], rows[20:23], []]
        for history in histories:
            answers = []
            for name in ("default", "shop"):
                request = pb.RecommendRequest(
                    history_item_ids=[r[0] for r in history],
                    n=4 * ITEMS_PER_SID,  # the items of the 4 best beams
                    catalog=name,
                )
                response = stub.Recommend(request, timeout=30)
                answers.append([(i.item_id, tuple(i.sid.codes), i.score) for i in response.items])
            # The same items and SIDs in the same order; scores to 1e-5 (the second request's
            # prompt may be a prefix-cache hit, which rounds fp32 rows apart).
            assert [a[:2] for a in answers[0]] == [a[:2] for a in answers[1]]
            assert [a[2] for a in answers[0]] == pytest.approx([a[2] for a in answers[1]], rel=1e-5)
            assert len(answers[0]) == 4 * ITEMS_PER_SID
            by_sid: dict[tuple[int, ...], list[str]] = {}
            for item, sid, _ in answers[0]:
                by_sid.setdefault(sid, []).append(item)
            assert by_sid == {sid: expected[sid] for sid in by_sid}  # whole SIDs, artifact order


def test_a_bad_catalog_file_names_the_row(sid_model: SidModel, tmp_path: Path) -> None:
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None
    path = tmp_path / "bad.csv"
    path.write_text('item_id,sid\na,"1,2,3"\nb,"1,2,16"\n')
    # Callers (`widebeam generate`, `decoder serve`) report ValueErrors as bad input.
    with pytest.raises(CatalogError, match=r"line 3: item 'b': SID code 16 at level 2") as info:
        load_catalog_constraint(path, layout, "cpu")
    assert isinstance(info.value, ValueError)
    with pytest.raises(CatalogError, match="cannot read catalog file"):
        load_catalog_constraint(tmp_path / "missing.jsonl", layout, "cpu")
