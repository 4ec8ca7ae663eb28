from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer
from tokenizers.models import WordLevel

from widebeam.services.catalog.sid_layout import SidLayout, SidLevel

SPEC = "1000:4,1004:3,1007:5;begin=998;end=999"


def test_parse_and_queries() -> None:
    lay = SidLayout.parse(SPEC)
    assert lay.levels == (SidLevel(1000, 4), SidLevel(1004, 3), SidLevel(1007, 5))
    assert (lay.begin_token_id, lay.end_token_id) == (998, 999)
    assert lay.depth == 3
    assert lay.path_length(include_begin=True) == 5
    assert lay.path_length(include_begin=False) == 4
    assert lay.code_to_token(1, 2) == 1006
    assert lay.token_to_code(1006) == (1, 2)
    assert lay.token_to_code(1011) == (2, 4)
    assert lay.token_to_code(998) is None
    assert lay.token_to_code(1012) is None


def test_parse_without_specials_and_whitespace() -> None:
    lay = SidLayout.parse(" 10:2 , 12:2 ")
    assert lay.begin_token_id is None and lay.end_token_id is None
    assert lay.path_length(True) == 2
    assert SidLayout.parse("10:2,12:2;end=5").path_length(True) == 3


@pytest.mark.parametrize("spec", [SPEC, "0:256,256:256,512:256", "5:3;end=1", "5:3;begin=0"])
def test_spec_and_dict_round_trip(spec: str) -> None:
    lay = SidLayout.parse(spec)
    assert SidLayout.parse(lay.to_spec()) == lay
    assert SidLayout.from_dict(json.loads(json.dumps(lay.to_dict()))) == lay


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no levels"),
        ("10", "not BASE:SIZE"),
        ("10:2:3", "not BASE:SIZE"),
        ("10:x", "not an integer"),
        ("-1:5", "negative"),
        ("10:-5", "negative"),
        ("10:0", "size must be positive"),
        ("10:5,12:5", "overlapping"),
        ("20:5,10:11", "overlapping"),
        ("10:5;begin=12", "inside level 0"),
        ("10:5;foo=1", "begin=ID or end=ID"),
        ("10:5;begin", "begin=ID or end=ID"),
        ("10:5;begin=1;begin=2", "given twice"),
        ("10:5;begin=-3", "negative"),
        ("10:5;begin=1;end=1", "must differ"),
        ("10:5,", "not BASE:SIZE"),
    ],
)
def test_parse_errors(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SidLayout.parse(spec)


def test_code_to_token_range_errors() -> None:
    lay = SidLayout.parse(SPEC)
    with pytest.raises(ValueError, match="level 3 out of range"):
        lay.code_to_token(3, 0)
    with pytest.raises(ValueError, match="code 4 out of range"):
        lay.code_to_token(1, 4)


def test_validate_against_vocab() -> None:
    lay = SidLayout.parse("10:5,15:5;begin=30")
    lay.validate_against_vocab(31)
    with pytest.raises(ValueError, match="token id 30"):
        lay.validate_against_vocab(30)
    with pytest.raises(ValueError, match="token id 19"):
        SidLayout.parse("10:5,15:5").validate_against_vocab(19)


def test_from_dict_malformed() -> None:
    with pytest.raises(ValueError, match="malformed"):
        SidLayout.from_dict({"levels": [{"base": 1}]})


def _write_tokenizer(path: Path, sid_tokens: list[str], specials: bool = True) -> None:
    vocab = {"<unk>": 0, "hello": 1, "world": 2, "<eos>": 3}
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    if specials:
        tok.add_special_tokens([AddedToken("<|sid_begin|>"), AddedToken("<|sid_end|>")])
    tok.add_tokens([AddedToken(t) for t in sid_tokens])
    tok.save(str(path / "tokenizer.json"))


def test_from_tokenizer(tmp_path: Path) -> None:
    sid_tokens = [
        f"<s_{letter}_{c}>" for letter, n in (("a", 4), ("b", 3), ("c", 5)) for c in range(n)
    ]
    _write_tokenizer(tmp_path, sid_tokens)
    lay = SidLayout.from_tokenizer(tmp_path)
    assert lay == SidLayout.parse("6:4,10:3,13:5;begin=4;end=5")
    # The tokenizer agrees with the layout on every SID token.
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.token_to_id("<s_b_2>") == lay.code_to_token(1, 2)
    assert SidLayout.from_tokenizer(tmp_path / "tokenizer.json") == lay


def test_from_tokenizer_sid_tokens_in_model_vocab(tmp_path: Path) -> None:
    vocab = {"<unk>": 0, "<s_a_0>": 1, "<s_a_1>": 2, "<s_b_0>": 3, "<s_b_1>": 4}
    Tokenizer(WordLevel(vocab, unk_token="<unk>")).save(str(tmp_path / "tokenizer.json"))
    assert SidLayout.from_tokenizer(tmp_path) == SidLayout.parse("1:2,3:2")


def test_from_tokenizer_without_sid_tokens(tmp_path: Path) -> None:
    _write_tokenizer(tmp_path, [], specials=False)
    assert SidLayout.from_tokenizer(tmp_path) is None


def test_from_tokenizer_level_not_contiguous(tmp_path: Path) -> None:
    # <s_b_1> is added before <s_b_0>, so level b's token ids run backwards.
    _write_tokenizer(tmp_path, ["<s_a_0>", "<s_a_1>", "<s_b_1>", "<s_b_0>"])
    with pytest.raises(ValueError, match=r"level 1 .* is not contiguous"):
        SidLayout.from_tokenizer(tmp_path)


def test_from_tokenizer_missing_code(tmp_path: Path) -> None:
    _write_tokenizer(tmp_path, ["<s_a_0>", "<s_a_2>"])
    with pytest.raises(ValueError, match=r"level 0 .* is not contiguous"):
        SidLayout.from_tokenizer(tmp_path)


def test_from_tokenizer_missing_level(tmp_path: Path) -> None:
    _write_tokenizer(tmp_path, ["<s_a_0>", "<s_c_0>"])
    with pytest.raises(ValueError, match=r"missing level\(s\) \[1\]"):
        SidLayout.from_tokenizer(tmp_path)
