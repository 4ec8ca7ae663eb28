"""Streamed beam candidates equal the exhaustive ranking over full log-prob rows."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.beam.logits_stats import logits_stats_torch
from widebeam.services.decoder.search.beam_candidates import RowLogprobs, top_candidates
from widebeam.services.decoder.search.beam_row_topk import top_in_blocks

VOCAB, HIDDEN = 97, 16  # the wide path ranks blocks of 64 tokens: 2 per row here


def _exhaustive(
    source: RowLogprobs, running: torch.Tensor, keep: int
) -> tuple[torch.Tensor, set[tuple[int, int]], torch.Tensor]:
    logprobs = torch.log_softmax(source.lm_head(source.hidden), dim=-1)
    if source.block_eos:
        logprobs[:, source.eos_ids] = float("-inf")
    if source.allowed is not None:
        mask = torch.full_like(logprobs, float("-inf"))
        tokens, valid = source.allowed
        for row in range(tokens.shape[0]):
            mask[row, tokens[row][valid[row]]] = 0.0
        logprobs = logprobs + mask
    vocab = source.vocab_size
    logprobs = logprobs.expand(running.shape[0], vocab)
    scores, flat = torch.topk((logprobs + running[:, None]).reshape(-1), keep)
    real = scores > -1.0e8  # ghost rows' candidates all tie at -1e9: any of them will do
    pairs = {(int(f) // vocab, int(f) % vocab) for f in flat[real]}
    return scores, pairs, logprobs


def _source(
    seed: int, rows: int, *, sparse: bool, block_eos: bool, chunk: int, vocab: int = VOCAB
) -> RowLogprobs:
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, HIDDEN, generator=gen) * 3
    hidden = torch.randn(rows, HIDDEN, generator=gen)
    allowed = None
    if sparse:
        width = 7
        tokens = torch.stack([torch.randperm(vocab, generator=gen)[:width] for _ in range(rows)])
        valid = torch.rand(rows, width, generator=gen) < 0.7
        allowed = (tokens, valid)
    # float64 products rounded once: a row's logits do not depend on how rows are chunked
    return RowLogprobs(
        hidden,
        lambda h: (h.double() @ weight.double().T).float(),
        vocab,
        torch.tensor([3, 5, 130] if vocab > 130 else [3, 5]),  # 130: in another block
        block_eos,
        allowed,
        chunk_elems=chunk,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("wide", [False, True])  # wide: blocks ranked, not rows
@pytest.mark.parametrize(("vocab", "chunk"), [(97, 200), (1000, 2500), (1000, 1 << 20)])
def test_streamed_equals_exhaustive(
    seed: int, sparse: bool, shared: bool, wide: bool, vocab: int, chunk: int
) -> None:
    k = 12
    gen = torch.Generator().manual_seed(100 + seed)
    running = torch.randn(k, generator=gen) * 2
    if shared:  # the first step: one hidden state, ghost rows at -1e9
        running = torch.full((k,), -1.0e9)
        running[0] = 0.0
    if seed == 3:  # many exact ties between rows
        running = torch.round(running)
    rows = 1 if shared else k
    source = _source(seed, rows, sparse=sparse, block_eos=seed % 2 == 0, chunk=chunk, vocab=vocab)
    keep = 2 * k
    want_scores, want_pairs, logprobs = _exhaustive(source, running, keep)
    got = top_candidates(source, running, keep, one_pass_limit=0 if wide else 1 << 21)
    # log-probs are logit - logsumexp here and log_softmax there: equal up to rounding
    torch.testing.assert_close(got.scores, want_scores, rtol=1e-6, atol=1e-5)
    real = got.scores > -1.0e8
    pairs = zip(got.rows[real].tolist(), got.tokens[real].tolist(), strict=True)
    assert set(pairs) == want_pairs
    finite = torch.isfinite(got.scores)
    # each candidate's own log-prob is the token's processed log-prob of its row
    assert torch.equal(got.scores[finite], (got.logprobs + running[got.rows])[finite])
    own = logprobs[got.rows, got.tokens]  # the reference's log-prob of each chosen pair
    torch.testing.assert_close(got.logprobs[finite], own[finite], rtol=1e-6, atol=1e-5)


def test_narrow_trie_pads_impossible_candidates() -> None:
    k = 4
    source = _source(0, k, sparse=True, block_eos=False, chunk=1 << 20)
    narrow = RowLogprobs(
        source.hidden,
        source.lm_head,
        VOCAB,
        source.eos_ids,
        False,
        (source.allowed[0][:, :1], torch.ones(k, 1, dtype=torch.bool)),
    )
    got = top_candidates(narrow, torch.zeros(k), keep=3 * k)
    assert got.scores.shape == (3 * k,)
    assert torch.isfinite(got.scores).sum() == k
    assert torch.isneginf(got.scores[k:]).all()


def test_rejects_mismatched_rows() -> None:
    source = _source(0, 3, sparse=False, block_eos=False, chunk=1 << 20)
    with pytest.raises(ValueError, match="3 hidden rows for 5 beams"):
        top_candidates(source, torch.zeros(5), keep=10)


@pytest.mark.parametrize("count", [1, 3, 8])
@pytest.mark.parametrize("vocab", [1000, 1024, 4099])
def test_top_in_blocks_equals_full_ranking(count: int, vocab: int) -> None:
    gen = torch.Generator().manual_seed(vocab + count)
    logits = torch.randn(37, vocab, generator=gen) * 3
    logits[4, ::3] = float("-inf")
    logits[5] = torch.round(logits[5])  # many exact ties
    logits[6, 7] = 50.0  # a banned token holds the best block's maximum
    banned = torch.tensor([7, 901])
    stats = logits_stats_torch(logits, 16)
    values, cols = top_in_blocks(logits, stats.lse, stats.block_max, count, banned, block=16)
    full = logits - stats.lse[:, None]
    full[:, banned] = float("-inf")
    want, _ = torch.topk(full, count, dim=1)
    assert torch.equal(values, want)
    assert torch.equal(full.gather(1, cols), values)  # the columns hold those values
    finite = torch.isfinite(values)
    for row in range(logits.shape[0]):
        picked = cols[row][finite[row]].tolist()
        assert len(picked) == len(set(picked)) and not set(picked) & {7, 901}
