"""Turn a finished request's search state into the caller-facing `RequestOutput`."""

from __future__ import annotations

from widebeam.services.decoder.request import BeamResult, RequestOutput
from widebeam.services.decoder.scheduler.request_state import RequestState


def build_output(state: RequestState) -> RequestOutput:
    spec = state.resolved.spec
    eos = set(state.resolved.eos_ids)
    beams = []
    for beam in state.search.results():
        stopped = bool(beam.tokens) and beam.tokens[-1] in eos
        items = None
        if state.constraint is not None:
            items = state.constraint.items_for_path(spec.input_ids, beam.tokens)
        beams.append(
            BeamResult(
                output_ids=beam.tokens,
                score=beam.score,
                cum_logprob=beam.cum_logprob,
                finish_reason="stop" if stopped else "length",
                logprobs=beam.token_logprobs if spec.return_logprobs else None,
                item_ids=items,
            )
        )
    version = state.constraint.version if state.constraint is not None else None
    return RequestOutput(
        spec.request_id, beams, catalog_version=version, prompt_tokens=state.prompt_len
    )
