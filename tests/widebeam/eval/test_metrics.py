"""Ranking metrics against hand-computed values, and the cutoffs reported for n."""

from __future__ import annotations

import math

import pytest

from widebeam.eval.metrics import cutoffs, mean_scores, sample_scores


def test_cutoffs_are_the_default_ks_up_to_n_and_n() -> None:
    assert cutoffs(10) == (1, 4, 8, 10)
    assert cutoffs(32) == (1, 4, 8, 16, 32)
    assert cutoffs(600) == (1, 4, 8, 16, 32, 50, 128, 512, 600)
    assert cutoffs(5, ks=(1, 3, 7)) == (1, 3, 5)


def test_one_target_recall_is_hit_and_ndcg_is_the_rank_discount() -> None:
    s = sample_scores(["x", "y", "t", "z"], ["t"], (1, 2, 3, 4))
    assert s["hit"] == s["recall"] == [0.0, 0.0, 1.0, 1.0]
    assert s["ndcg"] == [0.0, 0.0, pytest.approx(0.5), pytest.approx(0.5)]  # 1/log2(3+1)
    assert s["mrr"] == [0.0, 0.0, pytest.approx(1 / 3), pytest.approx(1 / 3)]


def test_several_targets_and_duplicates_counted_once() -> None:
    # Distinct order: a, b, c, d; a and c relevant; targets also hold e (never predicted).
    s = sample_scores(["a", "a", "b", "a", "c", "d"], ["a", "c", "e"], (1, 3, 4))
    assert s["hit"] == [1.0, 1.0, 1.0]
    assert s["recall"] == [pytest.approx(1 / 3), pytest.approx(2 / 3), pytest.approx(2 / 3)]
    dcg = 1 + 1 / math.log2(4)
    assert s["ndcg"][0] == pytest.approx(1.0)
    assert s["ndcg"][1] == pytest.approx(dcg / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    assert s["ndcg"][2] == pytest.approx(dcg / (1 + 1 / math.log2(3) + 1 / math.log2(4)))
    assert s["mrr"] == [1.0, 1.0, 1.0]


def test_means_over_samples() -> None:
    per = [sample_scores(["t"], ["t"], (1,)), sample_scores(["x"], ["t"], (1,))]
    means = mean_scores(per, (1,))
    assert means == {"hit@1": 0.5, "recall@1": 0.5, "ndcg@1": 0.5, "mrr@1": 0.5}
    assert mean_scores([], (1,))["recall@1"] == 0.0
