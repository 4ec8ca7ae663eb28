"""One request's step: from its rows' final hidden states to the next rows (and back into its
slot tables and trie nodes). Wide beams take the streamed expansion (`cohort.py`); narrow ones
and ordinary decoding rank full log-prob rows here, exactly as transformers does."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from widebeam.services.decoder.beam.beam_search import BeamSearch, StepSelection
from widebeam.services.decoder.beam.candidates import ONE_PASS_LIMIT
from widebeam.services.decoder.beam.expansion import Expander, Head
from widebeam.services.decoder.beam.logprobs import processed_logprobs
from widebeam.services.decoder.requests.spec import Normalization
from widebeam.services.decoder.scheduler.request_state import RequestState


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

    def advance(self, state: RequestState, hidden: torch.Tensor) -> StepSelection:
        """A request that does not stream (`advance_cohorts` takes those)."""
        search, constraint = state.search, state.constraint
        logits = self.logits(hidden)  # [rows, vocab] fp32
        mask = None
        if constraint is not None:
            mask = constraint.mask(state.nodes, search.eos_ids, self.vocab_size)
            if state.resolved.spec.normalization == Normalization.SID:
                # Every other logit -inf before normalising: the streamed path's columns.
                logits = logits + constraint.sid_mask(state.resolved.eos_ids, self.vocab_size)
        if isinstance(search, BeamSearch):
            block_eos = search.step < state.resolved.spec.min_new_tokens
            return search.advance(processed_logprobs(logits, mask, search.eos_ids, block_eos))
        return search.advance(logits, mask)


def apply_selection(state: RequestState, sel: StepSelection) -> None:
    """Re-parent the rows' slot tables, append this step's slots, move the trie nodes."""
    k, step = state.num_rows, state.search.step - 1
    new_slots = state.private_slots[step * k : (step + 1) * k]
    state.suffix_table = torch.cat((state.suffix_table[sel.parents], new_slots[:, None]), 1)
    state.pending_tokens = sel.tokens
    if state.constraint is not None:
        # At step 0 every row still sits on the prompt's single start node.
        nodes = state.nodes.expand(k) if state.nodes.shape[0] != k else state.nodes
        state.nodes = state.constraint.advance(nodes[sel.parents], sel.tokens)
