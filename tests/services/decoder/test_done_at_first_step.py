"""A beam request done by its first step is decoded once more before its first flag is read (the
engine queues a new request's decode behind its prefill without waiting); its answer is still
that first step's, as transformers gives it, and the requests decoded beside it are unchanged."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.hf_oracle import hf_generate
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.search.beam_search import BeamSearch

K = 4


def _first_step_tokens(engine: Engine, prompt: tuple[int, ...]) -> tuple[int, ...]:
    """The K tokens the first step ranks best (one step: every candidate ends there)."""
    probe = GenerationRequest("probe", prompt, beam_width=K, n=K, max_new_tokens=1)
    return tuple(sorted(beam.output_ids[0] for beam in engine.generate([probe])[0].beams))


def _assert_matches_transformers(
    sid_model: SidModel, engine: Engine, req: GenerationRequest, out: RequestOutput
) -> None:
    hf_model = AutoModelForCausalLM.from_pretrained(sid_model.model_dir, dtype=torch.float32)
    hf_model.eval()
    eos = list(engine.limits.default_eos_ids if req.eos_token_id is None else req.eos_token_id)
    expected = hf_generate(hf_model, req, eos, None)
    assert out.error is None, out.error
    assert [b.output_ids for b in out.beams] == [e.output_ids for e in expected]
    for beam, exp in zip(out.beams, expected, strict=True):
        assert beam.score == pytest.approx(exp.score, abs=1e-4)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("early_stopping", [True, False])
def test_request_done_at_first_step(
    sid_model: SidModel, overlap: bool, early_stopping: bool
) -> None:
    engine = sid_model.engine(overlap_scheduling=overlap)
    prompt = (5, 17, 42, 3)
    # Every one of the first step's K best candidates ends the search: done after one step.
    ending = GenerationRequest(
        "ending",
        prompt,
        beam_width=K,
        n=K,
        max_new_tokens=6,
        eos_token_id=_first_step_tokens(engine, prompt),
        early_stopping=early_stopping,
    )
    going = GenerationRequest("going", (9, 8, 7), beam_width=K, n=2, max_new_tokens=8)
    engine.submit(going)
    outputs = {out.request_id: out for out in engine.step()}
    engine.submit(ending)
    decoded_rows = engine.step_counts.decode_rows
    outputs |= {out.request_id: out for out in engine.step()}
    # Its rows went into this step's decode beside going's: its first flag was not waited for.
    assert engine.step_counts.decode_rows - decoded_rows == 2 * K
    while engine.has_unfinished():
        outputs |= {out.request_id: out for out in engine.step()}
    assert [len(beam.output_ids) for beam in outputs["ending"].beams] == [1] * K
    _assert_matches_transformers(sid_model, engine, ending, outputs["ending"])
    _assert_matches_transformers(sid_model, engine, going, outputs["going"])
    assert engine.stats().rows_in_use == 0


def test_resolve_done_rewinds_a_search_stepped_past_its_end() -> None:
    """Done at step 1 but stepped twice: its results and step count are step 1's."""
    search = BeamSearch(
        num_beams=2,
        num_return=2,
        length_penalty=1.0,
        early_stopping=False,
        eos_ids=torch.tensor([2]),
        max_new_tokens=5,
        device=torch.device("cpu"),
    )
    logprobs = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0, 0.5, -1.0]]), dim=1)
    search.advance(logprobs)
    done_at = search.step
    after_first = search.results()
    search.advance(logprobs.expand(2, -1))
    assert search.step == done_at + 1
    stepped_on = search.results()
    search.resolve_done(False, done_at)  # not done there: nothing is rewound
    assert search.step == done_at + 1 and len(search.host_steps) == done_at + 1
    search.resolve_done(True, done_at)
    assert search.done and search.step == done_at and len(search.host_steps) == done_at
    assert search.results() == after_first != stepped_on
