"""Result bookkeeping: logprobs, scores, constrained outputs, fewer paths than n."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest


@pytest.fixture(scope="module")
def engine(sid_model: SidModel) -> Engine:
    return sid_model.engine()


@pytest.mark.parametrize("k", [1, 6])
def test_logprobs_sum_to_cum_logprob_and_score_is_length_normalised(engine: Engine, k: int) -> None:
    out = engine.generate(
        [
            GenerationRequest(
                "r",
                (5, 9, 11),
                beam_width=k,
                n=k,
                max_new_tokens=6,
                length_penalty=1.5,
                return_logprobs=True,
            )
        ]
    )[0]
    assert len(out.beams) == k
    for beam in out.beams:
        assert len(beam.logprobs) == len(beam.output_ids)
        assert math.fsum(beam.logprobs) == pytest.approx(beam.cum_logprob, abs=1e-4)
        expected = beam.cum_logprob / len(beam.output_ids) ** 1.5
        assert beam.score == pytest.approx(expected, rel=1e-5)
    scores = [b.score for b in out.beams]
    assert scores == sorted(scores, reverse=True)


def test_constrained_beams_are_catalog_sids_with_their_items(
    engine: Engine, sid_model: SidModel
) -> None:
    layout = engine.sid_layout
    by_sid: dict[tuple[int, ...], list[str]] = {}
    for item, sid in sid_model.catalog:
        by_sid.setdefault(sid, []).append(item)
    out = engine.generate(
        [
            GenerationRequest(
                "c",
                (3, 4, layout.begin_token_id),
                beam_width=32,
                n=32,
                max_new_tokens=6,
                constrained=True,
            )
        ]
    )[0]
    assert len(out.beams) == 32 and out.catalog_version.startswith("file-")
    seen = set()
    for beam in out.beams:
        codes = tuple(layout.token_to_code(t)[1] for t in beam.output_ids[:3])
        assert beam.output_ids[3] == layout.end_token_id
        tail = beam.output_ids[4:]
        assert len(tail) == 1 and tail[0] in engine.limits.default_eos_ids
        assert beam.finish_reason == "stop"
        assert sorted(beam.item_ids) == sorted(by_sid[codes])
        seen.add(codes)
    assert len(seen) == 32


def test_fewer_valid_paths_than_n_returns_fewer_beams(sid_model: SidModel, tmp_path: Path) -> None:
    catalog = tmp_path / "three.jsonl"
    sids = [[1, 2, 3], [1, 2, 4], [7, 0, 0]]
    catalog.write_text(
        "".join(json.dumps({"item_id": f"x{i}", "sid": s}) + "\n" for i, s in enumerate(sids))
    )
    engine = sid_model.engine(catalog_path=str(catalog))
    out = engine.generate(
        [GenerationRequest("few", (8, 9), beam_width=8, n=8, max_new_tokens=6, constrained=True)]
    )[0]
    assert out.error is None
    assert sorted(b.item_ids[0] for b in out.beams) == ["x0", "x1", "x2"]


@pytest.mark.parametrize("constrained", [False, True])
def test_strongly_negative_length_penalty_still_returns_beams(
    engine: Engine, constrained: bool
) -> None:
    """Scores far below -1e9 (len ** 11 scaling) must not lose to empty finished slots, as they
    do in transformers' -1e9 bookkeeping (which then returns placeholder beams)."""
    req = GenerationRequest(
        "neg",
        (0,),
        beam_width=2,
        n=2,
        max_new_tokens=6,
        length_penalty=-11.0,
        early_stopping=True,
        constrained=constrained,
    )
    out = engine.generate([req])[0]
    assert out.error is None and len(out.beams) == 2
    scores = [beam.score for beam in out.beams]
    assert scores == sorted(scores, reverse=True) and all(math.isfinite(x) for x in scores)
