"""`widebeam gateway serve`: flags, environment, and a real process that logs its address."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.services.gateway.conftest import HISTORY
from widebeam.cli import build_parser
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.cli import settings_from_args
from widebeam.services.gateway.settings import EVENT_LOOPS, GatewaySettings


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_GATEWAY_DECODERS", "a:1, b:2")
    monkeypatch.setenv("WIDEBEAM_GATEWAY_API_KEYS", "k1,k2")
    monkeypatch.setenv("WIDEBEAM_GATEWAY_MAX_BEAM_WIDTH", "256")
    settings = GatewaySettings()
    assert settings.decoders == ["a:1", "b:2"] and settings.max_beam_width == 256
    assert settings.key_values() == [b"k1", b"k2"]
    assert "k1" not in repr(settings)  # SecretStr: keys never appear in logs or reprs


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_GATEWAY_PORT", "9000")
    monkeypatch.setenv("WIDEBEAM_GATEWAY_HOST", "0.0.0.0")
    args = build_parser().parse_args(
        ["gateway", "serve", "--port", "0", "--decoder", "h:1,h:2", "--api-key", "x",
         "--api-key", "y", "--redis-url", "redis://r:6379/0"]
    )  # fmt: skip
    settings = settings_from_args(args)
    assert settings.port == 0 and settings.host == "0.0.0.0"
    assert settings.decoders == ["h:1", "h:2"] and settings.key_values() == [b"x", b"y"]
    assert settings.redis_url == "redis://r:6379/0"


def test_event_loop_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GatewaySettings().event_loop == "asyncio"
    monkeypatch.setenv("WIDEBEAM_GATEWAY_EVENT_LOOP", "uvloop")
    assert GatewaySettings().event_loop == "uvloop"
    args = build_parser().parse_args(["gateway", "serve", "--event-loop", "asyncio"])
    assert settings_from_args(args).event_loop == "asyncio"
    monkeypatch.setenv("WIDEBEAM_GATEWAY_EVENT_LOOP", "trio")
    with pytest.raises(ValueError, match="event_loop"):
        GatewaySettings()


def test_invalid_settings_are_a_clear_error() -> None:
    args = build_parser().parse_args(["gateway", "serve", "--decoder", "nohostport"])
    with pytest.raises(ValueError, match="decoder addresses must be HOST:PORT"):
        settings_from_args(args)


@pytest.mark.parametrize("event_loop", EVENT_LOOPS)
def test_serve_process(decoder_server: BackgroundServer, event_loop: str) -> None:
    command = [
        sys.executable, "-m", "widebeam.cli", "gateway", "serve", "--port", "0",
        "--decoder", decoder_server.address, "--api-key", "secret-key-4711",
        "--event-loop", event_loop,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            match = re.search(r"gateway listening on (http://\S+)", line)
            url = match.group(1) if match else None
        assert url, "".join(lines)
        with httpx.Client(base_url=url, timeout=10) as http:
            for _ in range(100):
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            assert http.get("/readyz").status_code == 200
            wrong = http.get("/v1/models", headers={"Authorization": "Bearer wrong-key-0815"})
            assert wrong.status_code == 401
            key = {"Authorization": "Bearer secret-key-4711"}
            models = http.get("/v1/models", headers=key)
            assert models.status_code == 200
            # A recommendation and a streamed chat completion: the gateway's calls to the
            # decoder run on this event loop too.
            body = {"history": HISTORY, "n": 3, "beam_width": 4}
            recommended = http.post("/v1/recommend", json=body, headers=key)
            assert recommended.status_code == 200, recommended.text
            assert len(recommended.json()["items"]) == 3
            chat = {
                "model": models.json()["data"][0]["id"], "n": 3, "max_tokens": 4,
                "messages": [{"role": "user", "content": "<t_1><t_2>"}], "stream": True,
            }  # fmt: skip
            streamed = http.post("/v1/chat/completions", json=chat, headers=key)
            assert streamed.status_code == 200, streamed.text
            data = [line for line in streamed.text.splitlines() if line.startswith("data: ")]
            assert len(json.loads(data[0].removeprefix("data: "))["choices"]) == 3
            assert data[-1] == "data: [DONE]"
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=20)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines) + rest
    assert "secret-key-4711" not in output and "wrong-key-0815" not in output
