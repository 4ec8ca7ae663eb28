"""Artifact encoding without Redis: round trip, chunking, tamper detection, no objects."""

from __future__ import annotations

import numpy as np
import pytest

from widebeam.services.catalog.store import ArtifactError, codec


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
