"""Turn a finished request's search state into the caller-facing `RequestOutput`."""

from __future__ import annotations

from widebeam.services.decoder.request import BeamResult, RequestOutput
from widebeam.services.decoder.scheduler.request_state import RequestState


def build_output(state: RequestState) -> RequestOutput:
    spec = state.resolved.spec
    eos = set(state.resolved.eos_ids)
    finished = state.search.results()
    items: list[list[str] | None] = [None] * len(finished)
    if state.constraint is not None:
        items = state.constraint.items_for_paths(spec.input_ids, [b.tokens for b in finished])
    with_logprobs = spec.return_logprobs
    # Positional tuples in one comprehension: wide requests build thousands of these per answer.
    beams = [
        BeamResult(
            beam.tokens,
            beam.score,
            beam.cum_logprob,
            "stop" if beam.tokens and beam.tokens[-1] in eos else "length",
            beam.token_logprobs if with_logprobs else None,
            beam_items,
        )
        for beam, beam_items in zip(finished, items, strict=True)
    ]
    version = state.constraint.version if state.constraint is not None else None
    return RequestOutput(
        spec.request_id, beams, catalog_version=version, prompt_tokens=state.prompt_len
    )
