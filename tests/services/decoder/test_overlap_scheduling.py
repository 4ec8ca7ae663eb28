"""Overlap scheduling (prepare step t+1 before reading step t's stop flags) computes exactly what
synchronous scheduling computes: same digest over every output, same order of completions."""

from __future__ import annotations

import random

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest


def _requests(engine: Engine) -> list[GenerationRequest]:
    begin = engine.sid_layout.begin_token_id
    rng = random.Random(5)
    reqs = []
    for i in range(16):
        prompt = tuple(rng.randrange(200) for _ in range(rng.randint(1, 9)))
        kind = i % 4
        if kind == 0:  # stops early on EOS, decided on the device
            k = rng.choice([2, 4])
            probe = GenerationRequest("probe", prompt, beam_width=k, n=k, max_new_tokens=6)
            # tokens these beams actually produce mid-way: EOS is hit, and not at the start
            eos = {b.output_ids[3] for b in engine.generate([probe])[0].beams}
            reqs.append(
                GenerationRequest(
                    f"eos{i}",
                    prompt,
                    beam_width=k,
                    n=2,
                    max_new_tokens=14,
                    eos_token_id=tuple(sorted(eos)),
                    early_stopping=True if i % 8 == 0 else rng.choice([True, False, "never"]),
                )
            )
        elif kind == 1:
            reqs.append(
                GenerationRequest(
                    f"sid{i}",
                    (*prompt, begin),
                    beam_width=16,
                    n=4,
                    max_new_tokens=5,
                    constrained=True,
                )
            )
        elif kind == 2:
            reqs.append(GenerationRequest(f"greedy{i}", prompt, max_new_tokens=rng.randint(1, 6)))
        else:
            reqs.append(
                GenerationRequest(f"beam{i}", prompt, beam_width=8, n=3, max_new_tokens=1 + i % 5)
            )
    return reqs


def _run(
    sid_model: SidModel, overlap: bool, abort: bool, switches: bool = True
) -> tuple[str, list[str]]:
    """`switches`: overlap scheduling's admit_before_flags and answers_after_launch."""
    engine = sid_model.engine(
        overlap_scheduling=overlap,
        max_rows=60,  # requests queue and join mid-flight
        admit_before_flags=switches,
        answers_after_launch=switches,
    )
    requests = _requests(engine)
    for req in requests:
        engine.submit(req)
    order, outputs, steps = [], {}, 0
    while engine.has_unfinished():
        for out in engine.step():
            order.append(out.request_id)
            outputs[out.request_id] = out
        steps += 1
        if abort and steps == 3:
            assert engine.abort("eos0") and engine.abort("sid1")
    assert engine.stats().rows_in_use == 0 and engine.stats().kv_slots_free > 0
    kept = [r for r in requests if r.request_id in outputs]
    if not abort:  # some searches did stop on the device's decision, before their token limit
        early = [o for o in outputs.values() if o.beams and len(o.beams[0].output_ids) < 14]
        assert any(o.request_id.startswith("eos") for o in early)
    return digest([outputs[r.request_id] for r in kept]), order


@pytest.mark.parametrize("switches", [True, False])
def test_overlap_matches_sync(sid_model: SidModel, switches: bool) -> None:
    sync_digest, sync_order = _run(sid_model, overlap=False, abort=False)
    overlap_digest, overlap_order = _run(sid_model, overlap=True, abort=False, switches=switches)
    assert overlap_digest == sync_digest
    assert len(overlap_order) == len(sync_order) == 16
    assert overlap_order == sync_order


@pytest.mark.parametrize("switches", [True, False])
def test_overlap_matches_sync_with_aborts(sid_model: SidModel, switches: bool) -> None:
    sync = _run(sid_model, overlap=False, abort=True)
    overlap = _run(sid_model, overlap=True, abort=True, switches=switches)
    assert overlap[0] == sync[0]
    assert "eos0" not in overlap[1] and "sid1" not in overlap[1]
