"""One request's step: from its rows' final hidden states to the next rows (and back into its
slot tables and trie nodes). Wide beams take the streamed expansion (`beam_cohorts.py`); narrow
ones and ordinary decoding rank full log-prob rows here, exactly as transformers does."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.runner.request_state import RequestState, apply_selection
from widebeam.services.decoder.search.beam_candidates import ONE_PASS_LIMIT
from widebeam.services.decoder.search.beam_expansion import Expander, Head
from widebeam.services.decoder.search.beam_logprobs import processed_logprobs
from widebeam.services.decoder.search.beam_search import BeamSearch


@dataclass(frozen=True)
class StepPolicy:
    vocab_size: int
    logits: Head  # fp32 logits (the dense path)
    expander: Expander  # the streamed path (model-dtype logits inside)
    streamed: bool  # beam_expansion == BeamExpansion.STREAMED
    dense_limit: int  # k * vocab up to which beams are ranked densely anyway
    one_pass_limit: int = ONE_PASS_LIMIT  # k * min(keep, width) beyond which blocks are ranked

    def streams(self, num_beams: int) -> bool:
        """Whether a beam of this width takes the streamed expansion."""
        return self.streamed and num_beams * self.vocab_size > self.dense_limit

    def advance(self, state: RequestState, hidden: torch.Tensor) -> None:
        """Step a request that does not stream (`advance_cohorts` takes those) and re-parent
        its rows."""
        search, constraint = state.search, state.constraint
        logits = self.logits(hidden)  # [rows, vocab] fp32
        mask = None
        if constraint is not None:
            mask = constraint.mask(state.nodes, search.eos_ids, self.vocab_size)
            if state.resolved.spec.normalization == Normalization.SID:
                # Every other logit -inf before normalising: the streamed path's columns.
                logits = logits + constraint.sid_mask(state.resolved.eos_ids, self.vocab_size)
        if isinstance(search, BeamSearch):
            logprobs = processed_logprobs(logits, mask, search.eos_ids, state.eos_blocked)
            selection = search.advance(logprobs)
        else:
            selection = search.advance(logits, mask)
        parents, tokens = selection.parents[None], selection.tokens[None]  # [1, k]
        nodes = None
        if constraint is not None:
            nodes = constraint.advance_rows(state.nodes[None], parents, tokens)
        apply_selection([state], parents, tokens, nodes)
