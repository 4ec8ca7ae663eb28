"""The artifact's string table (UTF-8 blob + offsets) equals a per-string encoding, both ways,
for any ids: newlines, NULs, non-ASCII, empty strings; malformed offsets decode as before."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from widebeam.services.catalog.trie_io import decode_strings, encode_strings


def encode_each(strings: list[str]) -> tuple[bytes, list[int]]:
    encoded = [s.encode("utf-8") for s in strings]
    return b"".join(encoded), [0, *itertools.accumulate(map(len, encoded))]


@pytest.mark.parametrize("alphabet", ["abc-0", "ab\n é漢\x00😀", "\n"])
@pytest.mark.parametrize("seed", range(40))
def test_matches_per_string_encoding(alphabet: str, seed: int) -> None:
    rng = random.Random(seed)
    strings = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        for _ in range(rng.randint(0, 40))
    ]
    blob, offsets = encode_strings(strings)
    assert blob.dtype == np.uint8 and offsets.dtype == np.int64
    assert (blob.tobytes(), offsets.tolist()) == encode_each(strings)
    assert decode_strings(blob, offsets) == strings


def test_edges() -> None:
    assert [a.tolist() for a in encode_strings([])] == [[], [0]]
    assert decode_strings(np.zeros(0, np.uint8), np.zeros(1, np.int64)) == []
    assert decode_strings(*encode_strings([""])) == [""]
    assert decode_strings(*encode_strings(["", ""])) == ["", ""]
    with pytest.raises(UnicodeEncodeError):
        encode_strings(["ok", "\ud800"])  # a lone surrogate is not UTF-8


def test_invalid_utf8_and_odd_offsets() -> None:
    blob = np.frombuffer("aé".encode(), dtype=np.uint8)
    with pytest.raises(UnicodeDecodeError):
        decode_strings(blob, np.array([0, 2, 3]))  # splits é between two strings
    # Offsets that do not cover the blob read as slices, as they always did.
    assert decode_strings(blob, np.array([0, 1])) == ["a"]
    assert decode_strings(blob, np.array([0, 1, 0])) == ["a", ""]
