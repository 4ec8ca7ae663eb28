"""A wide beam's next candidates straight from hidden states, never as [rows × vocab] fp32.

The reference (`BeamSearch.advance` on full log-prob rows) ranks `logprobs + running[:, None]`
over every row and token and keeps the best `keep`. This computes the same set chunk by chunk:

* per chunk of at most `chunk_elems` logits: the LM head in the model's dtype, then one pass for
  each row's log-sum-exp over the full vocabulary (transformers' normalisation) and its block
  maxima (`widebeam/kernels/beam`); log-probs `logit - lse` only for the candidates: the row's best
  blocks (unconstrained) or the trie's allowed tokens of the row's node (constrained);
* narrow enough requests (a trie's children, or few rows) rank each row's top `keep` at once;
* wide ones rank blocks, not rows: each of the chunk's (row, block) pairs scores its block's
  best accumulated value, and the chunk keeps the tokens of its best `keep` blocks. The keep-th
  best value overall is at least the keep-th best block score (each of those blocks holds one
  such value), so every winner lies in one of those blocks: exact, at fixed shapes, with no
  host read (the step can be captured in a CUDA graph).

The result equals the exhaustive top `keep` (ties may be ordered differently).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from widebeam.kernels.beam.logits_stats import BLOCK, logits_stats
from widebeam.services.decoder.search.beam_row_topk import top_in_blocks

DEFAULT_CHUNK_ELEMS = 1 << 27  # logits per chunk (256 MiB in bf16)
# Up to this many per-row candidates (k × min(keep, width)) each row's top `keep` is ranked;
# beyond, blocks are ranked instead (a per-row top-`keep` over the vocabulary costs too much).
ONE_PASS_LIMIT = 1 << 21


class Candidates(NamedTuple):  # [keep] each for one request, [B, keep] for B requests
    scores: torch.Tensor  # [keep] fp32 accumulated log-probs, best first
    rows: torch.Tensor  # [keep] int64 row (of the previous step) each candidate extends
    tokens: torch.Tensor  # [keep] int64
    logprobs: torch.Tensor  # [keep] fp32 the token's own log-prob


class RowTop(NamedTuple):
    logprobs: torch.Tensor  # [n, c] fp32, best first
    tokens: torch.Tensor  # [n, c] int64


@dataclass(frozen=True)
class RowLogprobs:
    """One request's processed log-probs, computed on demand for any of its source rows."""

    hidden: torch.Tensor  # [S, hidden] model dtype; S = k, or 1 when all rows share one state
    # (hidden [n, hidden], columns [C] int64 when given) -> [n, vocab] or [n, C] model dtype
    lm_head: Callable[..., torch.Tensor]
    vocab_size: int
    eos_ids: torch.Tensor  # [n_eos] int64
    block_eos: bool  # min_new_tokens not reached: EOS is -inf
    allowed: tuple[torch.Tensor, torch.Tensor] | None  # [S, W] int64 tokens, [S, W] bool
    chunk_elems: int = DEFAULT_CHUNK_ELEMS
    # [C] int64 sorted vocabulary ids: "sid" normalisation, the head computes these columns
    # only (constrained requests: every allowed token is one of them); None: the whole vocab.
    columns: torch.Tensor | None = None

    @property
    def head_width(self) -> int:
        """Columns of one row of logits."""
        return self.vocab_size if self.columns is None else self.columns.shape[0]

    def logits(self, sources: torch.Tensor) -> torch.Tensor:  # [n, head_width] model dtype
        """The LM head for hidden rows `sources` [n] int64."""
        if self.columns is None:
            return self.lm_head(self.hidden[sources])
        return self.lm_head(self.hidden[sources], self.columns)

    def allowed_logprobs(
        self,
        logits: torch.Tensor,  # [n, head_width] model dtype
        lse: torch.Tensor,  # [n] fp32 log-sum-exp of the rows
        tokens: torch.Tensor,  # [n, W] int64 vocabulary ids
    ) -> torch.Tensor:  # [n, W] fp32
        cols = tokens
        if self.columns is not None:
            # Padding lanes (token 0) land anywhere: their valid flag drops them.
            cols = torch.searchsorted(self.columns, tokens).clamp(max=self.head_width - 1)
        return logits.gather(1, cols).float() - lse[:, None]

    @property
    def num_rows(self) -> int:
        return self.hidden.shape[0]

    @property
    def width(self) -> int:
        return self.vocab_size if self.allowed is None else self.allowed[0].shape[1]

    def top(self, rows: torch.Tensor, count: int) -> RowTop:
        """Each of `rows`' best `count` (≤ width) log-probs and their tokens."""
        step = max(1, self.chunk_elems // self.head_width)
        parts = [self._top_chunk(rows[i : i + step], count) for i in range(0, len(rows), step)]
        return RowTop(torch.cat([p.logprobs for p in parts]), torch.cat([p.tokens for p in parts]))

    def _top_chunk(self, rows: torch.Tensor, count: int) -> RowTop:
        logits = self.logits(rows)  # [n, head_width] model dtype
        banned = self.eos_ids if self.block_eos else self.eos_ids[:0]
        if self.allowed is None:
            stats = logits_stats(logits)
            assert stats.block_max is not None
            return RowTop(*top_in_blocks(logits, stats.lse, stats.block_max, count, banned))
        lse = logits_stats(logits, blocks=False).lse  # [n] fp32
        tokens, valid = self.allowed[0][rows], self.allowed[1][rows]
        picked = self.allowed_logprobs(logits, lse, tokens)  # [n, W] fp32
        invalid = ~valid | torch.isin(tokens, banned) if banned.numel() else ~valid
        values, lanes = torch.topk(picked.masked_fill(invalid, float("-inf")), count, dim=1)
        return RowTop(values, tokens.gather(1, lanes))


def top_candidates(
    source: RowLogprobs,
    running: torch.Tensor,  # [k] fp32 running scores of the k rows
    keep: int,
    one_pass_limit: int = ONE_PASS_LIMIT,
) -> Candidates:
    """The best `keep` (row, token) candidates of one request, best first; never reads from the
    device, so it can run inside a captured graph."""
    k, width, device = running.shape[0], source.width, running.device
    if source.num_rows not in (1, k):
        raise ValueError(f"{source.num_rows} hidden rows for {k} beams")
    if k * min(keep, width) <= one_pass_limit:
        return Candidates(*(c[0] for c in row_candidates(source, running[None], keep)))
    parts = _wide_parts(source, running, keep)
    total = sum(p[0].numel() for p in parts)
    if total < keep:  # a trie narrower than keep / k: pad as impossible candidates
        zeros = torch.zeros(keep - total, dtype=torch.int64, device=device)
        minus_inf = torch.full((keep - total,), float("-inf"), device=device)
        parts.append((minus_inf, zeros, zeros, minus_inf))
    scores, cand_rows, cand_tokens, cand_lps = (torch.cat(col) for col in zip(*parts, strict=True))
    best, pick = torch.topk(scores, keep)
    return Candidates(best, cand_rows[pick], cand_tokens[pick], cand_lps[pick])


def row_candidates(
    source: RowLogprobs,  # B * rows_each hidden rows, request by request
    running: torch.Tensor,  # [B, k] fp32
    keep: int,
) -> Candidates:  # each [B, keep]
    """Each row's best min(keep, width) tokens, then each request's best `keep` of those (rows
    of a request that share one hidden state share its tokens)."""
    batch, k = running.shape
    rows_each, device = source.num_rows // batch, running.device
    width = min(keep, source.width)
    top = source.top(torch.arange(source.num_rows, device=device), width)
    lps = top.logprobs.view(batch, rows_each, width).expand(batch, k, width)
    tokens = top.tokens.view(batch, rows_each, width).expand(batch, k, width)
    scores = (lps + running[:, :, None]).reshape(batch, k * width)
    rows = torch.arange(k, device=device).repeat_interleave(width).expand(batch, k * width)
    lps, tokens = lps.reshape(batch, k * width), tokens.reshape(batch, k * width)
    if k * width < keep:  # a trie narrower than keep / k: pad as impossible candidates
        pad = keep - k * width
        minus_inf = torch.full((batch, pad), float("-inf"), device=device)
        zeros = torch.zeros((batch, pad), dtype=torch.int64, device=device)
        scores, lps = torch.cat((scores, minus_inf), 1), torch.cat((lps, minus_inf), 1)
        rows, tokens = torch.cat((rows, zeros), 1), torch.cat((tokens, zeros), 1)
    best, pick = torch.topk(scores, keep, dim=1)
    return Candidates(best, rows.gather(1, pick), tokens.gather(1, pick), lps.gather(1, pick))


Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # scores, rows, tokens, lps


def _wide_parts(source: RowLogprobs, running: torch.Tensor, keep: int) -> list[Part]:
    """Per chunk of hidden rows, the `keep` best candidates among its best-scoring blocks (or,
    constrained, among all its allowed tokens)."""
    k, device = running.shape[0], running.device
    step = max(1, source.chunk_elems // source.head_width)
    parts = []
    for start in range(0, source.num_rows, step):
        sources = torch.arange(start, min(start + step, source.num_rows), device=device)
        # The rows this chunk's hidden states feed, and each one's hidden row within the chunk.
        if source.num_rows == 1:
            rows, local = (
                torch.arange(k, device=device),
                torch.zeros(k, dtype=torch.int64, device=device),
            )
        else:
            rows, local = sources, torch.arange(len(sources), device=device)
        logits = source.logits(sources)  # [n, head_width] model dtype
        if source.allowed is None:
            part = _best_blocks(source, logits, rows, local, running, keep)
        else:
            part = _best_allowed(source, logits, sources, rows, local, running, keep)
        parts.append(part)
    return parts


def _best_blocks(
    source: RowLogprobs,
    logits: torch.Tensor,  # [n, vocab] model dtype
    rows: torch.Tensor,  # [m] int64 beam rows fed by the chunk
    local: torch.Tensor,  # [m] int64 each row's logits row
    running: torch.Tensor,  # [k] fp32
    keep: int,
) -> Part:
    device, vocab = logits.device, source.vocab_size
    stats = logits_stats(logits)
    assert stats.block_max is not None
    banned = source.eos_ids if source.block_eos else source.eos_ids[:0]
    block_max = _mask_banned_blocks(logits, stats.block_max, banned)  # [n, blocks] fp32
    blocks = block_max.shape[1]
    base = running[rows] - stats.lse[local]  # [m] fp32
    block_scores = block_max[local] + base[:, None]  # [m, blocks] fp32
    count = min(keep, block_scores.numel())
    flat = torch.topk(block_scores.reshape(-1), count, sorted=False).indices  # a set: no sort
    at, block = flat // blocks, flat % blocks
    cols = block[:, None] * BLOCK + torch.arange(BLOCK, device=device)  # [count, BLOCK]
    from_row = local[at][:, None]
    lps = logits[from_row, cols.clamp(max=vocab - 1)].float() - stats.lse[from_row]
    invalid = cols >= vocab
    if banned.numel():
        invalid |= torch.isin(cols, banned)
    lps = lps.masked_fill(invalid, float("-inf"))  # [count, BLOCK] fp32
    acc = lps + running[rows[at]][:, None]
    return _best_of(acc, rows[at][:, None].expand_as(cols), cols, lps, keep)


def _mask_banned_blocks(
    logits: torch.Tensor,  # [n, vocab] model dtype
    block_max: torch.Tensor,  # [n, blocks] fp32, over all tokens
    banned: torch.Tensor,  # [b] int64
) -> torch.Tensor:  # [n, blocks] fp32, the maxima over allowed tokens only
    if not banned.numel():
        return block_max
    vocab = logits.shape[1]
    block = banned // BLOCK  # [b] (a repeated block is recomputed to the same value)
    cols = block[:, None] * BLOCK + torch.arange(BLOCK, device=logits.device)  # [b, BLOCK]
    values = logits[:, cols.clamp(max=vocab - 1)].float()  # [n, b, BLOCK]
    drop = (cols >= vocab) | torch.isin(cols, banned)
    block_max = block_max.clone()
    block_max[:, block] = values.masked_fill(drop, float("-inf")).amax(dim=2)
    return block_max


def _best_allowed(
    source: RowLogprobs,
    logits: torch.Tensor,  # [n, vocab] model dtype
    sources: torch.Tensor,  # [n] int64 the chunk's hidden rows
    rows: torch.Tensor,  # [m] int64
    local: torch.Tensor,  # [m] int64
    running: torch.Tensor,  # [k] fp32
    keep: int,
) -> Part:
    assert source.allowed is not None
    lse = logits_stats(logits, blocks=False).lse  # [n] fp32
    tokens, valid = source.allowed[0][sources], source.allowed[1][sources]  # [n, W]
    lps = source.allowed_logprobs(logits, lse, tokens)  # [n, W] fp32
    banned = source.eos_ids if source.block_eos else source.eos_ids[:0]
    invalid = ~valid | torch.isin(tokens, banned) if banned.numel() else ~valid
    lps = lps.masked_fill(invalid, float("-inf"))[local]  # [m, W]
    acc = lps + running[rows][:, None]
    return _best_of(acc, rows[:, None].expand_as(lps), tokens[local], lps, keep)


def _best_of(
    acc: torch.Tensor,  # [a, b] fp32 accumulated scores
    rows: torch.Tensor,  # [a, b] int64
    tokens: torch.Tensor,  # [a, b] int64
    lps: torch.Tensor,  # [a, b] fp32
    keep: int,
) -> Part:
    # Unsorted: a chunk's part is ranked again with the others (`top_candidates`).
    best, pick = torch.topk(acc.reshape(-1), min(keep, acc.numel()), sorted=False)
    return best, rows.reshape(-1)[pick], tokens.reshape(-1)[pick], lps.reshape(-1)[pick]
