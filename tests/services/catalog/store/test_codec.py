"""Artifact encoding without Redis: round trip, chunking, tamper detection, no objects."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tests.services.catalog.store.legacy_artifact import old_single_stream
from widebeam.services.catalog.store import ArtifactError, codec, zlib_pieces


def sample() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "a": rng.integers(0, 1000, size=(300, 3), dtype=np.int32),
        "b": np.arange(1000, dtype=">i8"),  # big-endian input comes back little-endian
        "empty": np.zeros(0, dtype=np.uint8),
        "flags": np.array([True, False]),
    }


@pytest.mark.parametrize("chunk_bytes", [64, 1 << 20])
def test_round_trip(chunk_bytes: int) -> None:
    chunks, info = codec.encode_chunks(sample(), chunk_bytes)
    assert all(len(c) <= chunk_bytes for c in chunks)
    assert info["chunk_count"] == len(chunks) == len(info["chunk_sha256"])
    codec.verify_chunks(chunks, info, "t")
    out = codec.decode_chunks(chunks, info, "t")
    assert list(out) == list(sample())
    for name, arr in sample().items():
        np.testing.assert_array_equal(out[name], arr)
        assert out[name].dtype == arr.dtype.newbyteorder("<")


def test_tampered_and_missing_chunks() -> None:
    chunks, info = codec.encode_chunks(sample(), 64)
    bad = list(chunks)
    bad[1] = bytes([bad[1][0] ^ 1]) + bad[1][1:]
    with pytest.raises(ArtifactError, match=r"chunk 1/.* checksum mismatch"):
        codec.verify_chunks(bad, info, "t")
    with pytest.raises(ArtifactError, match=r"chunk 2/.* missing"):
        codec.verify_chunks([*chunks[:2], None, *chunks[3:]], info, "t")


def test_object_arrays_rejected() -> None:
    with pytest.raises(TypeError, match="not a plain numeric type"):
        codec.encode_chunks({"o": np.array([object()])}, 64)


def test_pieces_round_trip_across_arrays_and_chunks() -> None:
    chunks, info = codec.encode_chunks(sample(), 64, piece_bytes=1000, workers=3)
    pieces = -(-info["raw_bytes"] // 1000)
    assert info["compression"] == "zlib-pieces" and len(info["piece_chunks"]) == pieces > 5
    assert sum(info["piece_chunks"]) == len(chunks) and all(len(c) <= 64 for c in chunks)
    out = codec.decode_chunks(iter(chunks), info, "t", workers=2)
    for name, arr in sample().items():
        np.testing.assert_array_equal(out[name], arr)
    # the threads change nothing in the bytes written
    assert codec.encode_chunks(sample(), 64, piece_bytes=1000, workers=1) == (chunks, info)


def test_artifacts_published_before_pieces_still_decode() -> None:
    chunks, info = old_single_stream(sample(), 64)
    assert len(chunks) > 3
    out = codec.decode_chunks(chunks, info, "t")
    for name, arr in sample().items():
        np.testing.assert_array_equal(out[name], arr)


def test_pieces_that_do_not_add_up_are_refused() -> None:
    chunks, info = codec.encode_chunks(sample(), 64, piece_bytes=1000)
    for change in (
        {"piece_chunks": info["piece_chunks"][:-1]},  # a piece short
        {"piece_chunks": [*info["piece_chunks"][:-1], info["piece_chunks"][-1] + 1]},
        {"piece_bytes": 0},
        {"piece_bytes": 999},  # more pieces than described
        {"piece_bytes": None},
        {"raw_bytes": 10**15},  # never allocated
        {"raw_bytes": "many"},
        {"payload_bytes": None},
    ):
        with pytest.raises(ArtifactError, match=r"pieces|raw bytes|decompresses|not described"):
            codec.decode_chunks(chunks, info | change, "t")


def test_a_piece_longer_than_its_place_is_refused() -> None:
    """A piece whose stream holds more than its place is refused before any byte of it lands
    (it would overwrite the next piece's place)."""
    whole = bytes(range(256)) * 8  # 2048 bytes where the layout says 1024
    chunks = [zlib.compress(whole), zlib.compress(whole[:1024])]
    with pytest.raises(ArtifactError, match="piece 0: decompresses past its 1024 bytes"):
        zlib_pieces.decompress(chunks, 2048, 1024, [1, 1], "t", workers=2)


def test_a_truncated_piece_is_refused() -> None:
    chunks, info = codec.encode_chunks(sample(), 64, piece_bytes=1000)
    short = [*chunks[:-1], chunks[-1][:-3]]
    with pytest.raises(ArtifactError, match="decompress"):
        codec.decode_chunks(short, info, "t")
    with pytest.raises(ArtifactError, match="missing"):
        codec.decode_chunks([None, *chunks[1:]], info, "t")


def test_every_array_starts_aligned_and_the_padding_is_checked() -> None:
    chunks, info = codec.encode_chunks(sample(), 1 << 20)
    assert info["encoding"] == "wbarrays/2" and info["raw_bytes"] % codec.ALIGN == 0
    raw = bytearray(zlib.decompress(chunks[0]))
    arrays = codec.split_arrays(memoryview(raw))
    base = np.frombuffer(raw, np.uint8).ctypes.data
    assert all((a.ctypes.data - base) % codec.ALIGN == 0 for a in arrays.values())
    assert all(a.flags.aligned for a in arrays.values())
    # the byte after the first array ("a": 300 x 3 int32 = 3600 bytes) is padding
    first = arrays["a"].ctypes.data - base + arrays["a"].nbytes
    raw[first] = 1
    with pytest.raises(ValueError, match="nonzero padding"):
        codec.split_arrays(memoryview(raw))
