"""RQ-KMeans SIDs: ranges, determinism, the collision rule, reconstruction error."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from widebeam.services.catalog.sids import build_sids, encode
from widebeam.services.catalog.sids.dedupe import dedupe_last_level
from widebeam.services.catalog.sids.kmeans import kmeans, nearest


def clustered(n: int = 2000, dim: int = 16, clusters: int = 20, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim)) * 3.0
    return (centres[rng.integers(clusters, size=n)] + rng.normal(size=(n, dim))).astype(np.float32)


def test_codes_in_range_and_shape() -> None:
    sizes = (16, 8, 32)
    result = build_sids(clustered(), sizes, seed=1)
    assert result.codes.shape == (2000, 3) and result.codes.dtype == np.int64
    for level, k in enumerate(sizes):
        assert result.codes[:, level].min() >= 0 and result.codes[:, level].max() < k
        assert result.codebooks[level].shape == (k, 16)
    assert result.stats.codes_used[0] == 16  # every first-level code serves some items


def test_deterministic_given_seed() -> None:
    x = clustered()
    a, b = build_sids(x, (16, 16, 16), seed=3), build_sids(x, (16, 16, 16), seed=3)
    np.testing.assert_array_equal(a.codes, b.codes)
    c = build_sids(x, (16, 16, 16), seed=4)
    assert not np.array_equal(a.codes, c.codes)


def test_dedupe_makes_sids_unique_when_there_is_room() -> None:
    x = clustered(n=3000)
    raw = build_sids(x, (16, 16, 32), seed=0, dedupe=False)
    assert raw.stats.colliding_items_before > 0  # the case under test actually occurs
    deduped = build_sids(x, (16, 16, 32), seed=0)
    np.testing.assert_array_equal(deduped.codes[:, 0], raw.codes[:, 0])  # only L-2.. move
    assert len(np.unique(deduped.codes, axis=0)) == 3000
    assert deduped.stats.colliding_items == 0 and deduped.stats.unique_sids == 3000
    # Moving items costs reconstruction quality, but the codes still beat a one-level code.
    assert raw.stats.recon_mse[-1] <= deduped.stats.final_mse < raw.stats.recon_mse[0]


def test_dedupe_rule_closest_keeps_code_others_take_nearest_free() -> None:
    codebook = np.array([[0.0], [1.0], [2.0], [10.0]], dtype=np.float32)  # [K=4, D=1]
    # Three items of prefix (0,) on code 0; one item of prefix (1,) on code 0 (no collision).
    codes = np.array([[0, 0], [0, 0], [0, 0], [1, 0], [0, 1]], dtype=np.int64)
    last_input = np.array([[0.4], [0.1], [0.3], [0.0], [1.0]], dtype=np.float32)
    moved = dedupe_last_level(codes, last_input, codebook)
    assert moved == 2
    assert codes[1].tolist() == [0, 0]  # closest to codeword 0 keeps it
    assert codes[2].tolist() == [0, 2]  # next closest: codeword 1 is used by item 4, so 2
    assert codes[0].tolist() == [0, 3]  # last: only 3 is free
    assert codes[3].tolist() == [1, 0]  # other prefixes are untouched


def test_full_prefix_moves_to_nearest_free_pair() -> None:
    upper = np.array([[0.0], [5.0]], dtype=np.float32)  # level L-2, K2 = 2
    lower = np.array([[0.0], [1.0]], dtype=np.float32)  # level L-1, K1 = 2
    # Prefix (0,) holds three items but only two codes; item 2 must go to code_{L-2} = 1.
    codes = np.array([[0, 0], [0, 1], [0, 1]], dtype=np.int64)
    pair_input = np.array([[0.0], [1.0], [1.2]], dtype=np.float32)
    last_input = pair_input - upper[codes[:, 0]]
    moved = dedupe_last_level(codes, last_input, lower, pair_input, upper)
    assert moved == 1
    assert codes.tolist() == [[0, 0], [0, 1], [1, 0]]  # 1.2 is nearest to 5 + 0 among free


def test_overfull_catalog_reports_shared_sids() -> None:
    result = build_sids(clustered(n=500, dim=4), (4, 4), seed=0)
    assert result.stats.unique_sids == 16  # every SID is in use ...
    assert result.stats.colliding_items >= 500 - 16  # ... and most items share one


def test_reconstruction_error_decreases_with_levels() -> None:
    stats = build_sids(clustered(), (16, 16, 16, 16), seed=0, dedupe=False).stats
    errors = [stats.energy, *stats.recon_mse]
    assert all(a > b for a, b in itertools.pairwise(errors))


def test_encode_reproduces_codes_without_dedupe() -> None:
    x = clustered()
    result = build_sids(x, (8, 8), seed=0, dedupe=False)
    np.testing.assert_array_equal(encode(x, result.codebooks), result.codes)


def test_fewer_items_than_codes() -> None:
    x = clustered(n=5, dim=3)
    result = build_sids(x, (8, 8), seed=0)
    assert result.codes.max() < 8 and result.stats.unique_sids == 5


def test_kmeans_finds_separated_clusters() -> None:
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [20, 0], [0, 20]], dtype=np.float32)
    x = (centres[np.repeat(np.arange(3), 50)] + rng.normal(size=(150, 2))).astype(np.float32)
    found = kmeans(x, 3, np.random.default_rng(0))
    index, _ = nearest(centres, found)
    assert sorted(index.tolist()) == [0, 1, 2]


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((3,), np.float32), "2-D"),
        (np.zeros((0, 4), np.float32), "empty"),
        (np.array([[1.0, np.nan]], np.float32), "NaN"),
        (np.array([["a", "b"]]), "numeric"),
    ],
)
def test_bad_embeddings(bad: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_sids(bad, (4,))


def test_bad_codebook_sizes() -> None:
    with pytest.raises(ValueError, match="positive"):
        build_sids(clustered(n=10), (4, 0))
