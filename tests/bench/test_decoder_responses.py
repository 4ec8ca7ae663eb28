"""bench/decoder_responses.py builds the answer shape it times: one beam per hypothesis, each
with its tokens and item, and the response carries them all."""

from __future__ import annotations

from tests.bench.smoke import load_bench_module
from widebeam.services.decoder.server.convert import generate_response


def test_wide_output_is_a_constrained_answer() -> None:
    bench = load_bench_module("decoder_responses")
    out = bench.wide_output(64)
    assert len(out.beams) == 64 and all(len(b.output_ids) == 4 for b in out.beams)
    assert [b.item_ids for b in out.beams[:2]] == [["item-0"], ["item-1"]]
    response = generate_response("r", "default", out)
    assert len(response.beams) == 64 and response.beams[63].item_ids == ["item-63"]
