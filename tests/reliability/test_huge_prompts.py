"""A multi-megabyte text prompt (under the body limit) does not stop the gateway: its length is
checked against the model's context before anything is tokenized (400 `prompt_too_long`), and a
prompt that passes is tokenized off the event loop, so other clients are answered meanwhile.

Before, the chat and completions routes tokenized on the event loop: a 3.6 MB prompt froze
every other client for seconds. The verdict counts answers to other requests between the huge
request being sent and being answered; it does not time anything."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.reliability.support import GatewayApp
from tests.services.gateway.support import gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
# ~3.6 MB, ~600,000 tokens for the tiny model's tokenizer: seconds to tokenize.
HUGE_TEXT = ("<t_5> hello <s_a_3> " * 200_000)[:3_600_000]
# While the huge prompt is tokenized the loop must go on answering: this many other answers
# (a call takes ~1,000x less time than tokenizing the prompt).
OTHER_ANSWERS = 100
HANG_GUARD_S = 300.0


def huge_body(path: str) -> dict[str, Any]:
    if path == CHAT:
        return {"model": "model", "messages": [{"role": "user", "content": HUGE_TEXT}]}
    return {"model": "model", "prompt": HUGE_TEXT, "max_tokens": 2}


@pytest.fixture(scope="module")
def lenient_gateway(rel_decoder: BackgroundServer) -> Iterator[GatewayApp]:
    """A gateway whose character bound lets the huge prompt through to the tokenizer."""
    settings = gateway_settings([rel_decoder.address], max_prompt_chars_per_token=10_000)
    with GatewayApp(settings) as app:
        yield app


@pytest.fixture(scope="module")
def strict_gateway(rel_decoder: BackgroundServer) -> Iterator[GatewayApp]:
    with GatewayApp(gateway_settings([rel_decoder.address])) as app:
        yield app


@pytest.mark.parametrize("path", [CHAT, CMPL])
def test_other_clients_are_answered_while_a_huge_prompt_is_tokenized(
    lenient_gateway: GatewayApp, path: str
) -> None:
    base = lenient_gateway.url
    body = huge_body(path)
    huge: dict[str, Any] = {}
    sent = threading.Event()

    def send_huge() -> None:
        with httpx.Client(base_url=base, timeout=HANG_GUARD_S) as http:
            sent.set()
            response = http.post(path, json=body)
            huge.update(status=response.status_code, error=response.json().get("error", {}))

    others: list[str] = []
    with httpx.Client(base_url=base, timeout=HANG_GUARD_S) as http:
        assert http.get("/healthz").status_code == 200  # the connection is open
        sender = threading.Thread(target=send_huge, daemon=True)
        sender.start()
        sent.wait(HANG_GUARD_S)
        deadline = time.monotonic() + HANG_GUARD_S
        while sender.is_alive() and time.monotonic() < deadline:
            others.append(str(http.get("/v1/models").status_code))
        sender.join(HANG_GUARD_S)
    print(
        f"\n{path} with a {len(HUGE_TEXT) / 1e6:.1f} MB prompt: {len(others)} other requests "
        f"answered meanwhile ({set(others)}); the prompt: {huge.get('status')} "
        f"{huge.get('error', {}).get('message', '')[:120]}"
    )
    # Tokenized, then refused by the decoder (too many tokens), not by the character bound.
    assert huge.get("status") == 400 and huge["error"]["code"] != "prompt_too_long", huge
    assert len(others) >= OTHER_ANSWERS and set(others) == {"200"}, others[-5:]


@pytest.mark.parametrize("path", [CHAT, CMPL])
def test_a_prompt_over_the_character_bound_is_refused_before_tokenizing(
    strict_gateway: GatewayApp, path: str
) -> None:
    with httpx.Client(base_url=strict_gateway.url, timeout=HANG_GUARD_S) as http:
        info = http.get("/v1/models").json()["data"][0]
        limit = info["max_model_len"] * strict_gateway.settings.max_prompt_chars_per_token
        assert limit < len(HUGE_TEXT)
        response = http.post(path, json=huge_body(path))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "prompt_too_long"
    assert error["param"] == ("messages" if path == CHAT else "prompt")
    assert f"the prompt has {len(HUGE_TEXT)} characters; at most {limit}" in error["message"]
