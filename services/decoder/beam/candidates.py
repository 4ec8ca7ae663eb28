"""A wide beam's next candidates straight from hidden states, never as [rows × vocab] fp32.

The reference (`BeamSearch.advance` on full log-prob rows) ranks `logprobs + running[:, None]`
over every row and token and keeps the best `keep`. This computes the same set chunk by chunk:

* per chunk of at most `chunk_elems` logits: the LM head in the model's dtype, then one pass for
  each row's log-sum-exp over the full vocabulary (transformers' normalisation) and its block
  maxima (`kernels/beam`); log-probs `logit - lse` only for the candidates: the row's best
  blocks (unconstrained) or the trie's allowed tokens of the row's node (constrained);
* narrow enough requests (a trie's children, or few rows) rank each row's top `keep` at once;
  otherwise pass 1 keeps each row's best `first_pass` tokens and `t` = the keep-th best
  accumulated score among them. Anything a row did not keep is ≤ its last kept value, so only
  rows whose last kept value is above `t` can hide winners: pass 2 recomputes just those rows
  with their full top `keep`. The result equals the exhaustive top `keep` (ties may be ordered
  differently). Only the two-pass path reads from the device (which rows need pass 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from widebeam.kernels.beam.logits_stats import logits_stats
from widebeam.services.decoder.beam.row_topk import top_in_blocks

DEFAULT_CHUNK_ELEMS = 1 << 27  # logits per chunk (256 MiB in bf16)
DEFAULT_FIRST_PASS = 16
# Up to this many per-row candidates (k × min(keep, width)) one pass ranks them all; beyond,
# the two-pass threshold avoids a per-row top-`keep` over the whole vocabulary.
ONE_PASS_LIMIT = 1 << 21


class Candidates(NamedTuple):
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
    lm_head: Callable[[torch.Tensor], torch.Tensor]  # [n, hidden] -> [n, vocab] model dtype
    vocab_size: int
    eos_ids: torch.Tensor  # [n_eos] int64
    block_eos: bool  # min_new_tokens not reached: EOS is -inf
    allowed: tuple[torch.Tensor, torch.Tensor] | None  # [S, W] int64 tokens, [S, W] bool
    chunk_elems: int = DEFAULT_CHUNK_ELEMS

    @property
    def num_rows(self) -> int:
        return self.hidden.shape[0]

    @property
    def width(self) -> int:
        return self.vocab_size if self.allowed is None else self.allowed[0].shape[1]

    def top(self, rows: torch.Tensor, count: int) -> RowTop:
        """Each of `rows`' best `count` (≤ width) log-probs and their tokens."""
        step = max(1, self.chunk_elems // self.vocab_size)
        parts = [self._top_chunk(rows[i : i + step], count) for i in range(0, len(rows), step)]
        return RowTop(torch.cat([p.logprobs for p in parts]), torch.cat([p.tokens for p in parts]))

    def _top_chunk(self, rows: torch.Tensor, count: int) -> RowTop:
        logits = self.lm_head(self.hidden[rows])  # [n, vocab] model dtype
        banned = self.eos_ids if self.block_eos else self.eos_ids[:0]
        if self.allowed is None:
            stats = logits_stats(logits)
            assert stats.block_max is not None
            return RowTop(*top_in_blocks(logits, stats.lse, stats.block_max, count, banned))
        lse = logits_stats(logits, blocks=False).lse  # [n] fp32
        tokens, valid = self.allowed[0][rows], self.allowed[1][rows]
        picked = logits.gather(1, tokens).float() - lse[:, None]  # [n, W] fp32
        invalid = ~valid | torch.isin(tokens, banned) if banned.numel() else ~valid
        values, lanes = torch.topk(picked.masked_fill(invalid, float("-inf")), count, dim=1)
        return RowTop(values, tokens.gather(1, lanes))


def top_candidates(
    source: RowLogprobs,
    running: torch.Tensor,  # [k] fp32 running scores of the k rows
    keep: int,
    first_pass: int = DEFAULT_FIRST_PASS,
    one_pass_limit: int = ONE_PASS_LIMIT,
) -> Candidates:
    k, width, device = running.shape[0], source.width, running.device
    if source.num_rows not in (1, k):
        raise ValueError(f"{source.num_rows} hidden rows for {k} beams")
    # Rows that share one hidden state (the first step) share its candidates, too.
    src_of = torch.zeros(k, dtype=torch.int64, device=device)
    if source.num_rows == k:
        src_of = torch.arange(k, device=device)
    first = min(width, max(first_pass, -(-keep // k)))
    if k * min(keep, width) <= one_pass_limit:  # small enough to rank every row's top keep
        first = min(keep, width)  # exact in one pass: no threshold check, no host sync
    top = source.top(torch.arange(source.num_rows, device=device), first)
    acc = top.logprobs[src_of] + running[:, None]  # [k, first] fp32
    lps, toks = top.logprobs[src_of], top.tokens[src_of]
    rows = torch.arange(k, device=device)[:, None].expand(k, first)
    parts = [(acc.reshape(-1), rows.reshape(-1), toks.reshape(-1), lps.reshape(-1))]
    if first < min(keep, width):  # else every row already offers all it could contribute
        threshold = torch.topk(acc.reshape(-1), keep).values[-1]
        over = (acc[:, -1] > threshold).nonzero().squeeze(1)  # the one host sync of a step
        if over.numel():
            count = min(keep, width)
            if source.num_rows == 1:
                again = source.top(torch.zeros(1, dtype=torch.int64, device=device), count)
                pick = torch.zeros_like(over)
            else:
                again, pick = source.top(over, count), torch.arange(len(over), device=device)
            acc[over] = float("-inf")  # their first-pass entries are replaced, not duplicated
            parts[0] = (acc.reshape(-1), *parts[0][1:])
            parts.append(
                (
                    (again.logprobs[pick] + running[over, None]).reshape(-1),
                    over[:, None].expand(len(over), count).reshape(-1),
                    again.tokens[pick].reshape(-1),
                    again.logprobs[pick].reshape(-1),
                )
            )
    short = keep - k * first  # a trie narrower than keep / k: pad as impossible candidates
    if short > 0:
        zeros = torch.zeros(short, dtype=torch.int64, device=device)
        minus_inf = torch.full((short,), float("-inf"), device=device)
        parts.append((minus_inf, zeros, zeros, minus_inf))
    scores, cand_rows, cand_tokens, cand_lps = (torch.cat(col) for col in zip(*parts, strict=True))
    best, pick = torch.topk(scores, keep)
    return Candidates(best, cand_rows[pick], cand_tokens[pick], cand_lps[pick])
