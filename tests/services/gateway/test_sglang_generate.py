"""SGLang's native `POST /generate` over raw HTTP against a real gateway and decoder: text and
input_ids, one prompt and a batch, beam results in SGLang's shape with the scores of
/v1/completions for the same prompt, constrained beams, stop_token_ids, and 400s that name
the field."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

PROMPT = "<t_1><t_2><t_3>"
SID_TEXT = re.compile(r"^<\|sid_begin\|>(<s_a_\d+>)(<s_b_\d+>)(<s_c_\d+>)<\|sid_end\|>$")


def generate(client: httpx.Client, body: dict[str, Any]) -> Any:
    response = client.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def completion_beams(client: httpx.Client, prompt: object, **fields: Any) -> list[dict[str, Any]]:
    response = client.post("/v1/completions", json={"model": "model", "prompt": prompt} | fields)
    assert response.status_code == 200, response.text
    return list(response.json()["choices"])


def check_shape(answer: dict[str, Any], beams: int) -> list[dict[str, Any]]:
    """SGLang's beam answer: the best beam on top, every beam in meta_info.beam_results."""
    results = answer["meta_info"]["beam_results"]
    assert len(results) == beams
    for beam in results:
        assert set(beam) == {"text", "output_ids", "meta_info"}
        reason = beam["meta_info"]["finish_reason"]
        assert reason["type"] in ("stop", "length")
        assert isinstance(beam["meta_info"]["sequence_score"], float)
    scores = [b["meta_info"]["sequence_score"] for b in results]
    assert scores == sorted(scores, reverse=True)
    best = results[0]
    assert answer["text"] == best["text"] and answer["output_ids"] == best["output_ids"]
    meta = answer["meta_info"]
    assert meta["sequence_score"] == best["meta_info"]["sequence_score"]
    assert meta["finish_reason"] == best["meta_info"]["finish_reason"]
    assert meta["completion_tokens"] == sum(len(b["output_ids"]) for b in results)
    assert meta["prompt_tokens"] > 0 and meta["e2e_latency"] >= 0 and meta["id"]
    return list(results)


def test_text_beam_search_scores_equal_completions(client: httpx.Client) -> None:
    answer = generate(
        client,
        {"text": PROMPT, "sampling_params": {"n": 4, "max_new_tokens": 4, "temperature": 0}},
    )
    results = check_shape(answer, 4)
    choices = completion_beams(client, PROMPT, n=4, beam_width=4, max_tokens=4)
    assert [b["output_ids"] for b in results] == [c["token_ids"] for c in choices]
    assert [b["text"] for b in results] == [c["text"] for c in choices]
    assert [b["meta_info"]["sequence_score"] for b in results] == [
        c["sequence_score"] for c in choices
    ]
    assert answer["meta_info"]["prompt_tokens"] == 3


def test_input_ids_with_a_wider_beam_than_n(client: httpx.Client) -> None:
    body = {
        "input_ids": [1, 2, 3],
        "sampling_params": {"beam_width": 6, "n": 3, "max_new_tokens": 3},
        "rid": "req-1",
    }
    answer = generate(client, body)
    results = check_shape(answer, 3)
    assert answer["meta_info"]["id"] == "req-1"
    choices = completion_beams(client, [1, 2, 3], n=3, beam_width=6, max_tokens=3)
    assert [b["meta_info"]["sequence_score"] for b in results] == [
        c["sequence_score"] for c in choices
    ]
    # beam_width alone returns that many beams (SGLang's n = beam width).
    wide = generate(client, {"input_ids": [1, 2, 3], "sampling_params": {"beam_width": 5}})
    assert len(wide["meta_info"]["beam_results"]) == 5


def test_batches_answer_a_list_in_prompt_order(client: httpx.Client) -> None:
    prompts = [[1, 2, 3], [4, 5], [6]]
    params = [{"n": 2, "max_new_tokens": 3}, {"n": 3, "max_new_tokens": 2}, {"max_new_tokens": 2}]
    answers = generate(client, {"input_ids": prompts, "sampling_params": params})
    assert isinstance(answers, list) and len(answers) == 3
    for prompt, param, answer in zip(prompts, params, answers, strict=True):
        single = generate(client, {"input_ids": prompt, "sampling_params": param})
        assert answer["output_ids"] == single["output_ids"]
        # Decoded in one batch, the prompts' scores may differ from a lone call's by rounding.
        beams = answer["meta_info"].get("beam_results", [answer])
        alone = single["meta_info"].get("beam_results", [single])
        assert [b["output_ids"] for b in beams] == [b["output_ids"] for b in alone]
        assert [b["meta_info"].get("sequence_score") for b in beams] == pytest.approx(
            [b["meta_info"].get("sequence_score") for b in alone], abs=1e-5
        )
    # One sampling_params object applies to every prompt; a text batch is answered the same way.
    texts = generate(
        client, {"text": ["<t_1><t_2>", "<t_4>"], "sampling_params": {"n": 2, "max_new_tokens": 2}}
    )
    assert [len(a["meta_info"]["beam_results"]) for a in texts] == [2, 2]
    alone = generate(client, {"text": "<t_4>", "sampling_params": {"n": 2, "max_new_tokens": 2}})
    assert texts[1]["output_ids"] == alone["output_ids"]


def test_greedy_has_sglangs_plain_shape(client: httpx.Client) -> None:
    answer = generate(client, {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}})
    assert "beam_results" not in answer["meta_info"]
    assert len(answer["output_ids"]) <= 3 and answer["meta_info"]["finish_reason"]["type"] in (
        "stop",
        "length",
    )
    greedy = completion_beams(client, [1, 2, 3], max_tokens=3)[0]
    assert answer["output_ids"] == greedy["token_ids"] and answer["text"] == greedy["text"]


def test_constrained_beams_are_catalog_items(
    client: httpx.Client, catalog_of: dict[str, tuple[int, ...]]
) -> None:
    sid_prompt = "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>"
    params = {"n": 6, "max_new_tokens": 5, "constrained": True, "catalog": "default"}
    answer = generate(client, {"text": sid_prompt, "sampling_params": params})
    results = check_shape(answer, 6)
    assert answer["meta_info"]["catalog"]["name"] == "default"
    for beam in results:
        match = SID_TEXT.match(beam["text"])
        assert match, beam["text"]
        codes = tuple(int(re.findall(r"\d+", g)[0]) for g in match.groups())
        items = beam["meta_info"]["item_ids"]
        assert items and all(catalog_of[item] == codes for item in items)
    choices = completion_beams(
        client, sid_prompt, n=6, beam_width=6, max_tokens=5, constrained=True
    )
    assert [b["meta_info"]["sequence_score"] for b in results] == [
        c["sequence_score"] for c in choices
    ]


def test_stop_token_ids_end_beams(client: httpx.Client) -> None:
    params: dict[str, Any] = {"n": 4, "max_new_tokens": 2, "ignore_eos": True}
    free = generate(client, {"input_ids": [1, 2, 3], "sampling_params": params})
    assert all(b["meta_info"]["finish_reason"]["type"] == "length"
               for b in free["meta_info"]["beam_results"])  # fmt: skip
    stop = free["output_ids"][0]  # the likeliest first token
    params |= {"ignore_eos": False, "stop_token_ids": [stop]}
    stopped = generate(client, {"input_ids": [1, 2, 3], "sampling_params": params})
    ended = [
        b for b in stopped["meta_info"]["beam_results"]
        if b["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    ]  # fmt: skip
    assert [b["output_ids"] for b in ended] == [[stop]]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": PROMPT, "input_ids": [1, 2]}, "text"),
        ({"sampling_params": {"n": 2}}, "input_ids"),
        ({"input_ids": []}, "input_ids"),
        ({"input_ids": [1, -2]}, "input_ids[1]"),
        ({"input_ids": [[1, 2], [3, "x"]]}, "input_ids[1][1]"),
        ({"input_ids": [1], "sampling_params": {"n": 1000}}, "sampling_params.n"),
        ({"input_ids": [1], "sampling_params": {"beam_width": 2, "n": 3}}, "sampling_params.n"),
        (
            {"input_ids": [1], "sampling_params": {"beam_width": 49, "n": 2}},
            "sampling_params.beam_width",
        ),
        ({"input_ids": [1], "sampling_params": {"n": True}}, "sampling_params.n"),
        ({"input_ids": [1], "sampling_params": {"nn": 2}}, "sampling_params.nn"),
        ({"input_ids": [1], "sampling_params": {"stop": "x"}}, "sampling_params.stop"),
        (
            {"input_ids": [1], "sampling_params": {"max_new_tokens": 5000}},
            "sampling_params.max_new_tokens",
        ),
        (
            {"input_ids": [1], "sampling_params": {"n": 2, "temperature": 0.7}},
            "sampling_params.temperature",
        ),
        ({"input_ids": [1], "sampling_params": {"catalog": "default"}}, "sampling_params.catalog"),
        (
            {"input_ids": [[1], [2]], "sampling_params": [{"n": 1}, {"n": 1000}]},
            "sampling_params[1].n",
        ),
        ({"input_ids": [[1], [2]], "sampling_params": [{"n": 1}]}, "sampling_params"),
        ({"input_ids": [[1], [2]], "rid": "one"}, "rid"),
        ({"input_ids": [[1]] * 1025}, "input_ids"),
        ({"text": ["<t_1>"] * 1025}, "text"),
        ({"text": []}, "text"),
        ({"text": ["<t_1>", 3]}, "text[1]"),
        ({"text": 3}, "text"),
        ({"input_ids": [1], "stream": True}, "stream"),
        ({"input_ids": [1], "return_logprob": True}, "return_logprob"),
        ({"input_ids": [1], "image_data": "x.png"}, "image_data"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = client.post("/generate", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert error["type"] == "invalid_request_error"


def test_generate_needs_the_api_key(decoder_server: BackgroundServer) -> None:
    settings = gateway_settings([decoder_server.address], api_keys=["k-1"])
    with GatewayServer(settings) as gateway, httpx.Client(base_url=gateway.url) as http:
        body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}
        assert http.post("/generate", json=body).status_code == 401
        ok = http.post("/generate", json=body, headers={"Authorization": "Bearer k-1"})
        assert ok.status_code == 200, ok.text


def test_requests_that_never_say_constrained_follow_default_constrained(
    decoder_server: BackgroundServer, catalog_of: dict[str, tuple[int, ...]]
) -> None:
    settings = gateway_settings([decoder_server.address], default_constrained=["*"])
    sid_prompt = "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>"
    with GatewayServer(settings) as gateway, httpx.Client(base_url=gateway.url) as http:
        body = {"text": sid_prompt, "sampling_params": {"n": 4, "max_new_tokens": 5}}
        answer = generate(http, body)
        assert answer["meta_info"]["catalog"]["name"] == "default"
        for beam in check_shape(answer, 4):
            assert SID_TEXT.match(beam["text"]), beam["text"]
            assert all(item in catalog_of for item in beam["meta_info"]["item_ids"])
        free = {"text": sid_prompt, "sampling_params": {"n": 4, "max_new_tokens": 5,
                                                       "constrained": False}}  # fmt: skip
        assert "catalog" not in generate(http, free)["meta_info"]


def test_cached_prompt_tokens_are_reported(client: httpx.Client) -> None:
    # 40 tokens no other test sends: 2 full pages of 16 for the decoder's prefix cache.
    prompt = [1 + (i * 37 + 11) % 190 for i in range(40)]
    params = {"n": 2, "max_new_tokens": 2, "temperature": 0}
    first, second = (
        generate(client, {"input_ids": prompt, "sampling_params": params})["meta_info"]
        for _ in range(2)
    )
    assert (first["prompt_tokens"], first["cached_tokens"]) == (40, 0)
    assert (second["prompt_tokens"], second["cached_tokens"]) == (40, 32)
    body = {"model": "model", "prompt": prompt, "n": 2, "beam_width": 2, "max_tokens": 2}
    usage = client.post("/v1/completions", json=body).json()["usage"]
    assert usage["prompt_tokens"] == 40 and usage["prompt_tokens_details"] == {"cached_tokens": 32}
