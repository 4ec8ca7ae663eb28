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
    beams = []
    for beam, beam_items in zip(finished, items, strict=True):
        stopped = bool(beam.tokens) and beam.tokens[-1] in eos
        beams.append(
            BeamResult(
                output_ids=beam.tokens,
                score=beam.score,
                cum_logprob=beam.cum_logprob,
                finish_reason="stop" if stopped else "length",
                logprobs=beam.token_logprobs if spec.return_logprobs else None,
                item_ids=beam_items,
            )
        )
    version = state.constraint.version if state.constraint is not None else None
    return RequestOutput(
        spec.request_id, beams, catalog_version=version, prompt_tokens=state.prompt_len
    )
