"""A beam step's outputs queued to the host: two copies per step for a whole cohort.

`BeamSearch.results` rebuilds the finished hypotheses from these host copies alone, so a
request's output never waits on the device. A cohort of B requests stacks its [B, k] results
into one int64 and one fp32 copy; each request keeps views of its own row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.services.decoder.beam.beam_step import StepResult
from widebeam.services.decoder.host_copies import to_host_async


class HostStep(NamedTuple):
    history: tuple[torch.Tensor, torch.Tensor]  # [2, k] int64 (parents, tokens), [k] fp32
    # finished slots: [4, k] int64 (step, parent, token, returnable), [3, k] fp32 (score,
    # cumulative log-prob, last token's log-prob)
    finished: tuple[torch.Tensor, torch.Tensor]


def stage_on_host(result: StepResult) -> list[HostStep]:
    """Queue the step's host copies (no wait); one `HostStep` per request of the batch."""
    st = result.state
    returnable = st.fin_done & ~st.fin_ghost & torch.isfinite(st.fin_scores)
    ints = torch.stack(  # [B, 6, k] int64
        (
            result.parents,
            result.tokens,
            st.fin_step,
            st.fin_parent,
            st.fin_token,
            returnable.to(torch.int64),
        ),
        dim=1,
    )
    floats = torch.stack(  # [B, 4, k] fp32
        (result.logprobs, st.fin_scores, st.fin_cum, st.fin_token_logprob), dim=1
    )
    ints, floats = to_host_async(ints), to_host_async(floats)
    return [
        HostStep((ints[b, :2], floats[b, 0]), (ints[b, 2:], floats[b, 1:]))
        for b in range(ints.shape[0])
    ]
