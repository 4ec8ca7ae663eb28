"""`widebeam loadgen` against a real decoder and gateway (in this process, on loopback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.support import GatewayApp
from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import free_port
from widebeam.cli import build_parser, main
from widebeam.loadgen.cli import read_items
from widebeam.services.decoder.server.background import BackgroundServer


@pytest.fixture(scope="module")
def gateway(sid_model: SidModel) -> Iterator[GatewayApp]:
    with BackgroundServer(make_settings(sid_model, max_rows=256)) as decoder:
        settings = gateway_settings([decoder.address], max_in_flight_per_decoder=2)
        with GatewayApp(settings) as app:
            yield app


def loadgen(gateway: GatewayApp, sid_model: SidModel, tmp_path: Path, *args: str) -> Any:
    out = tmp_path / "report.json"
    code = main(["loadgen", "--url", gateway.url, "--items-file", str(sid_model.catalog_path),
                 "--json", str(out), *args])  # fmt: skip
    return code, json.loads(out.read_text())


def test_mixed_closed_loop(gateway: GatewayApp, sid_model: SidModel, tmp_path: Path) -> None:
    code, report = loadgen(gateway, sid_model, tmp_path, "--mode", "closed", "--mixed",
                           "--beam-widths", "1,16", "--concurrency", "2", "--requests", "40",
                           "--warmup", "4")  # fmt: skip
    run = report["phases"][-1]
    assert code == 0 and [p["name"] for p in report["phases"]] == ["warmup", "closed"]
    assert run["by_status"] == {"200": 40} and run["wrong"] == 0
    assert {"chat/beam", "completions/sampled", "recommend/b16"} <= set(run["by_kind"])
    assert report["config"]["traffic"]["items"] == len(sid_model.catalog)


def test_open_loop_overload_is_shed(
    gateway: GatewayApp, sid_model: SidModel, tmp_path: Path
) -> None:
    code, report = loadgen(gateway, sid_model, tmp_path, "--rate", "150", "--duration", "1",
                           "--beam-widths", "16", "--warmup", "0")  # fmt: skip
    run = report["phases"][-1]
    assert code == 0 and report["capacity"] is None and run["name"] == "overload"
    assert run["shed"] > 0 and run["shed_with_retry_after"] == run["shed"]
    assert set(run["by_status"]) == {"200", "429"} and run["wrong"] == 0


def test_wrong_answers_fail_the_run(
    gateway: GatewayApp, sid_model: SidModel, tmp_path: Path
) -> None:
    out = tmp_path / "report.json"
    args = ["--items", "no-such-item", "--mode", "closed", "--requests", "3", "--warmup", "0"]
    code = main(["loadgen", "--url", gateway.url, "--concurrency", "1", "--json", str(out), *args])
    run = json.loads(out.read_text())["phases"][-1]
    assert code == 1 and run["by_status"] == {"400": 3}
    assert "unexpected 400: history has 1 item id(s) not in catalog" in next(iter(run["problems"]))


def test_items(tmp_path: Path) -> None:
    jsonl, plain = tmp_path / "c.jsonl", tmp_path / "ids.txt"
    jsonl.write_text('{"item_id": "a", "sid": [1]}\n{"item_id": 7, "sid": [2]}\n')
    plain.write_text("b\n\na\n")
    parse = build_parser().parse_args
    args = parse(["loadgen", "--url", "http://h:1", "--items", "x, a", "--items-file", str(jsonl)])
    assert read_items(args) == ["x", "a", "7"]
    assert read_items(parse(["loadgen", "--url", "u", "--items-file", str(plain)])) == ["b", "a"]
    assert main(["loadgen", "--url", "http://127.0.0.1:9"]) == 2  # no items: a clear error


def test_a_gateway_that_is_not_ready(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["loadgen", "--url", url, "--items", "a", "--ready-timeout", "0.3"]) == 2
    assert "not ready after 0.3 s (ConnectionRefusedError" in capsys.readouterr().err
