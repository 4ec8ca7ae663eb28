"""The check both wide-beam tests make: n = beam through SGLang's /generate gives `width`
distinct beams, best first, and /v1/completions with the same prompt and width gives the same
token ids and scores."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


def check_generate_matches_completions(
    http: httpx.Client, width: int, new_tokens: int, score_abs: float = 0.0
) -> list[dict[str, Any]]:
    """Returns /generate's beams. `score_abs` is how far the two routes' scores may differ
    (0: equal; a CUDA decoder's batches of other shapes may move the last digits)."""
    params = {"n": width, "max_new_tokens": new_tokens, "ignore_eos": True}
    answer = http.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": params})
    assert answer.status_code == 200, answer.text
    beams = answer.json()["meta_info"]["beam_results"]
    assert len(beams) == width and len({tuple(b["output_ids"]) for b in beams}) == width
    scores = [b["meta_info"]["sequence_score"] for b in beams]
    assert scores == sorted(scores, reverse=True)
    body = {"model": "model", "prompt": [1, 2, 3], "n": width, "beam_width": width,
            "max_tokens": new_tokens, "ignore_eos": True}  # fmt: skip
    completion = http.post("/v1/completions", json=body)
    assert completion.status_code == 200, completion.text
    choices = completion.json()["choices"]
    assert [c["token_ids"] for c in choices] == [b["output_ids"] for b in beams]
    expected = scores if score_abs == 0.0 else pytest.approx(scores, rel=0.0, abs=score_abs)
    assert [c["sequence_score"] for c in choices] == expected
    return beams
