"""The engine counts its forwards and how many requests shared them: requests run together
share one prefill forward and one beam expansion per step; the same requests run one after
another take one of each per request; decode forwards count their rows, prefills the prompt
tokens they computed."""

from __future__ import annotations

import dataclasses

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.expansion_graphs import MAX_COHORT
from widebeam.services.decoder.runner.step_counts import StepCounts

STEPS = 3


def _requests(tag: str, count: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            f"{tag}-{i}", (5, 6, 7 + i), beam_width=8, n=8, max_new_tokens=STEPS,
            eos_token_id=(),
        )
        for i in range(count)
    ]  # fmt: skip


def _untimed(counts: StepCounts) -> StepCounts:
    return dataclasses.replace(counts, step_seconds=0.0)


def test_requests_run_together_share_their_forwards(sid_model: SidModel) -> None:
    engine = sid_model.engine(dense_expansion_limit=0)  # every beam request streams
    outputs = engine.generate(_requests("together", 4))
    assert all(out.error is None for out in outputs)
    # one prefill of all four (it picks the first token), then STEPS - 1 decode forwards, and
    # every step's expansion is one cohort of four lockstep requests; the CPU has no prefill
    # graphs, so the prefill is launched op by op
    assert _untimed(engine.step_counts) == StepCounts(
        prefill_forwards=1, prefilled_requests=4, prefill_tokens=4 * 3, eager_prefills=1,
        decode_forwards=STEPS - 1, decode_rows=(STEPS - 1) * 4 * 8, beam_expansions=STEPS,
    )  # fmt: skip
    assert engine.step_counts.step_seconds > 0


def test_requests_run_apart_take_a_forward_each(sid_model: SidModel) -> None:
    engine = sid_model.engine(dense_expansion_limit=0)
    for request in _requests("apart", 4):
        [out] = engine.generate([request])
        assert out.error is None
    assert _untimed(engine.step_counts) == StepCounts(
        prefill_forwards=4, prefilled_requests=4, prefill_tokens=4 * 3, eager_prefills=4,
        decode_forwards=4 * (STEPS - 1), decode_rows=4 * (STEPS - 1) * 8,
        beam_expansions=4 * STEPS,
    )  # fmt: skip


def test_a_cohort_beyond_max_cohort_runs_as_batches_of_it(sid_model: SidModel) -> None:
    """More lockstep requests than `MAX_COHORT` expand in batches of at most that many (the
    largest batch captured at start-up), and each returns what it returns alone."""
    engine = sid_model.engine(dense_expansion_limit=0, max_rows=4 * MAX_COHORT)
    requests = [
        GenerationRequest(
            f"many-{i}", (5, 6 + i % 7, 7 + i), beam_width=2, n=2, max_new_tokens=STEPS,
            eos_token_id=(),
        )
        for i in range(MAX_COHORT + 3)
    ]  # fmt: skip
    outputs = engine.generate(requests)
    assert engine.step_counts.beam_expansions == STEPS * 2  # MAX_COHORT, then 3, every step
    alone = sid_model.engine(dense_expansion_limit=0)
    for request, out in zip(requests[-4:], outputs[-4:], strict=True):
        [expected] = alone.generate([request])
        assert [b.output_ids for b in out.beams] == [b.output_ids for b in expected.beams]
