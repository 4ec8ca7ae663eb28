"""The peers' real catalog files load unchanged: FlashRec's SID vocab file as its converter writes
it (SID-only, 3 or 3+1 codes) and OpenOneRec's sid2pid / sid2iid packed with base 8192, on
layouts whose codebook is not 8192."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.formats import peer_writers as pw
from tests.services.decoder.conftest import SidModel, sid_model  # noqa: F401 (fixture)
from widebeam.services.catalog.formats import CatalogError, build_trie, load_catalog, load_trie
from widebeam.services.catalog.sid_layout import SidLayout, SidLevel
from widebeam.services.decoder.catalog_loading import load_catalog_constraint

NO_END = SidLayout(cw.LAYOUT.levels, begin_token_id=98)  # cw.LAYOUT without its end token
SIDS = sorted({sid for _, sid, _, _ in cw.ROWS})


def layout_of(size: int) -> SidLayout:
    return SidLayout(tuple(SidLevel(100 + i * size, size) for i in range(3)), 98, 99)


def test_writers_produce_the_converters_bytes() -> None:
    rows = [("7", (15, 0, 7), 3.0, ""), ("sku", (0, 1, 2), 9.0, ""), ("8", (15, 0, 7), 5.0, "")]
    recif = pw.openonerec_sid2pid(rows)
    assert recif == (
        b'{"1006632967": [{"pid": 8, "count": 5, "count_after_downsample": 2}, {"pid": 7, '
        b'"count": 3, "count_after_downsample": 1}], "8194": [{"pid": "sku", "count": 9, '
        b'"count_after_downsample": 4}]}'
    )
    assert pw.flashrec_vocab(recif) == b'{"0,1,2,1":1,"15,0,7,1":1}'
    assert pw.flashrec_vocab(recif, levels=3) == b'{"0,1,2":1,"15,0,7":1}'


@pytest.mark.parametrize("levels", [4, 3])
def test_flashrec_vocab_file_is_a_sid_only_catalog(levels: int) -> None:
    data = pw.flashrec_vocab(pw.openonerec_sid2pid(cw.ROWS), levels=levels)
    table = load_catalog(data, layout=cw.LAYOUT)
    assert table.format == "flashrec" and table.depth == 3
    assert [tuple(s) for s in table.sids.tolist()] == SIDS
    assert table.item_ids == ["-".join(map(str, sid)) for sid in SIDS]  # documented ids
    trie = build_trie(table, cw.LAYOUT)
    assert trie.lookup_sid([15, 0, 7]) == ["15-0-7"]
    assert trie.num_sids == trie.num_items == len(SIDS)


def test_flashrec_end_marker_needs_a_layout_with_an_end_token() -> None:
    data = pw.flashrec_vocab(pw.openonerec_sid2pid(cw.ROWS))
    with pytest.raises(CatalogError, match=r"key '0,1,2,1': .* 3 levels and no end token"):
        load_catalog(data, layout=NO_END)
    three = pw.flashrec_vocab(pw.openonerec_sid2pid(cw.ROWS), levels=3)
    assert load_catalog(three, layout=NO_END).num_items == len(SIDS)
    with pytest.raises(CatalogError, match=r"key '1,2,3,0': .* must be 1 .*<\|sid_end\|>.* got 0"):
        load_catalog(b'{"1,2,3,0":1}', layout=cw.LAYOUT)
    # Items, not placeholders: a value other than 1 is an item id, with the end marker too.
    items = load_catalog(b'{"1,2,3,1": "a", "1,2,4,1": [5, 6]}', layout=cw.LAYOUT)
    assert items.item_ids == ["a", "5", "6"] and items.sids.tolist()[0] == [1, 2, 3]
    # No layout: keys are taken as they are (a real 4-level catalog).
    assert load_catalog(data).depth == 4


@pytest.mark.parametrize("id_key", ["pid", "iid"])
def test_openonerec_mapping_on_a_small_codebook(id_key: str) -> None:
    data = pw.openonerec_sid2pid(cw.ROWS, id_key=id_key)
    table = load_catalog(data, layout=cw.LAYOUT)  # codebook 16; keys packed with 8192
    assert table.format == "sid2pid" and table.codebook_size == pw.RECIF_BASE
    assert sorted(zip(table.item_ids, map(tuple, table.sids.tolist()), strict=True)) == sorted(
        (item, sid) for item, sid, _, _ in cw.ROWS
    )
    trie = build_trie(table, cw.LAYOUT)
    assert trie.lookup_sid([15, 0, 7]) == ["12", "11", "13"]  # by count, ties in file order
    i = table.item_ids.index("12")
    assert table.popularity[i] == 9.0 and table.metadata is not None
    assert table.metadata[i] == {"count_after_downsample": 4}


def test_codebook_from_the_layout_or_an_error_naming_codebook_size() -> None:
    # The key: packed with 8192, on the demo's 32-code layout.
    assert pw.recif_unpack(1946296335) == (29, 17, 15)
    table = load_catalog(b'{"1946296335": [{"pid": 1}]}', layout=layout_of(32))
    assert table.sids.tolist() == [[29, 17, 15]]
    # Packed with the layout's own codebook size: that base is the one that fits.
    table = load_catalog(cw.sid2pid(), layout=cw.LAYOUT)
    assert table.codebook_size == cw.C
    # Fits neither base.
    with pytest.raises(CatalogError, match=r"key '70000'.*C=16.*C=8192.*codebook_size"):
        load_catalog(b'{"70000": [{"pid": 1}]}', layout=cw.LAYOUT)
    # Both bases fit and disagree: 8195 is (0, 1, 3) in base 8192 and (8, 0, 3) in base 32.
    ambiguous = b'{"8195": [{"pid": 1}]}'
    with pytest.raises(CatalogError, match=r"key '8195'.*\[8, 0, 3\] or \[0, 1, 3\].*codebook_siz"):
        load_catalog(ambiguous, layout=layout_of(32))
    assert load_catalog(ambiguous, layout=layout_of(32), codebook_size=32).sids.tolist() == [
        [8, 0, 3]
    ]
    explicit = load_catalog(ambiguous, layout=layout_of(32), codebook_size=8192)
    assert explicit.sids.tolist() == [[0, 1, 3]]
    # Keys both bases read alike are no ambiguity.
    assert load_catalog(b'{"5": [{"pid": 1}]}', layout=layout_of(32)).sids.tolist() == [[0, 0, 5]]
    with pytest.raises(CatalogError, match=r"'pid' key .* 'iid' key"):
        load_catalog(b'{"5": [{"pid": 1, "iid": 2}]}', layout=cw.LAYOUT, format="sid2pid")


def test_converter_round_trip_serves_the_same_sids(
    sid_model: SidModel,  # noqa: F811
    tmp_path: Path,
) -> None:
    """OpenOneRec's mapping and FlashRec's conversion of it, as the decoder's catalog file and
    through the upload pipeline: the same SID paths, one item per SID for FlashRec's."""
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None and layout.end_token_id is not None
    rows = [(item, sid, 1.0, "") for item, sid in sid_model.catalog]
    recif = tmp_path / "sid2pid.json"
    recif.write_bytes(pw.openonerec_sid2pid(rows))
    vocab = tmp_path / "sid2pid_beamrec_l4.json"
    vocab.write_bytes(pw.flashrec_vocab(recif.read_bytes()))
    by_recif = load_catalog_constraint(recif, layout, "cpu").trie
    by_vocab = load_catalog_constraint(vocab, layout, "cpu").trie
    sids = sorted({sid for _, sid in sid_model.catalog})
    assert by_vocab.num_sids == by_recif.num_sids == len(sids)
    for sid in sids[:: max(1, len(sids) // 20)]:
        assert by_vocab.lookup_sid(list(sid)) == ["-".join(map(str, sid))]
        assert set(by_recif.lookup_sid(list(sid))) == {i for i, s in sid_model.catalog if s == sid}
    trie, fmt = load_trie(vocab, layout)
    assert fmt == "flashrec" and trie.content_hash == by_vocab.content_hash
