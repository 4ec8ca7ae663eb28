"""Turn a finished request's search state into the caller-facing `RequestOutput`."""

from __future__ import annotations

from collections.abc import Sequence

from widebeam.services.decoder.request import BeamResult, RequestOutput
from widebeam.services.decoder.scheduler.request_state import RequestState


def build_output(state: RequestState) -> RequestOutput:
    spec = state.resolved.spec
    eos = set(state.resolved.eos_ids)
    finished = state.search.results(spec.return_logprobs)
    count = len(finished.tokens)
    items: Sequence[list[str] | None] = [None] * count
    if state.constraint is not None:
        items = state.constraint.items_for_paths(spec.input_ids, finished.paths)
    logprobs = finished.token_logprobs or [None] * count
    tokens = finished.tokens
    reasons = ["length"] * count
    if eos:
        reasons = ["stop" if t and t[-1] in eos else "length" for t in tokens]
    # Tuples made straight from the columns: wide requests build thousands per answer.
    columns = (tokens, finished.scores, finished.cum_logprobs, reasons, logprobs, items)
    beams = list(map(BeamResult._make, zip(*columns, strict=True)))
    version = state.constraint.version if state.constraint is not None else None
    return RequestOutput(
        spec.request_id, beams, catalog_version=version, prompt_tokens=state.prompt_len
    )
