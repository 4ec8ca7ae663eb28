"""Faults: two `widebeam decoder serve` replicas behind one gateway; one is SIGKILLed under
load. Requests in flight on it end fast (200 after a retry on the other replica, or 503), never
past their deadline; every request sent after a short detection window is a 200."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.reliability.faults_support import Tally, run_clients, stop_clients
from tests.reliability.support import GatewayApp, process
from tests.services.decoder.conftest import SidModel
from tests.services.gateway.support import gateway_settings

pytestmark = pytest.mark.slow

DEADLINE_S = 5.0  # the gateway's request_timeout_s
DETECTION_S = 1.0  # after the kill, every request must succeed
AFTER_DETECTION = 20  # answers sent after the detection window that the verdict waits for
BODY = {"history": ["item-3", "item-7", "item-11"], "n": 4}


def _valid(response: httpx.Response) -> bool:
    items = response.json().get("items", [])
    return len(items) == 4


def test_a_killed_decoder_replica_fails_fast_and_the_other_takes_over(
    sid_model: SidModel, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        procs, addresses = [], []
        for i in range(2):
            log = tmp_path / f"decoder-{i}.log"
            args = ["decoder", "serve", "--model", str(sid_model.model_dir), "--catalog",
                    str(sid_model.catalog_path), "--port", "0"]  # fmt: skip
            procs.append(stack.enter_context(process(args, {}, log, "decoder serving on")))
            line = next(ln for ln in log.read_text().splitlines() if "decoder serving on" in ln)
            addresses.append(line.rsplit(" ", 1)[1].strip())
        settings = gateway_settings(addresses, request_timeout_s=DEADLINE_S, default_beam_width=8)
        gateway = stack.enter_context(GatewayApp(settings))
        url = f"{gateway.url}/v1/recommend"
        first = httpx.post(url, json=BODY, timeout=30)
        assert first.status_code == 200 and _valid(first), first.text

        tally = Tally()
        workers, stop = run_clients(4, url=url, body=BODY, tally=tally, check=_valid,
                                    timeout=DEADLINE_S + 10)  # fmt: skip
        try:
            tally.wait_for_answers(20, since=0.0, timeout=120)  # traffic on both replicas
            procs[0].kill()  # SIGKILL: no goodbye on the gRPC connections
            killed_at = time.monotonic()
            procs[0].wait(10)
            time.sleep(DETECTION_S)
            tally.wait_for_answers(AFTER_DETECTION, since=killed_at + DETECTION_S, timeout=120)
        finally:
            stop_clients(workers, stop)

    before = tally.counts()
    after = tally.counts(since=killed_at + DETECTION_S)
    # In flight at the kill, or sent before the detection window closed.
    around = Counter(
        c[1] for c in tally.calls if c[0] < killed_at + DETECTION_S and c[0] + c[2] > killed_at
    )
    print(
        f"\ndecoder kill: sent {len(tally.calls)}, by status {dict(before)}, around the kill "
        f"{dict(around)}, sent {DETECTION_S:.0f} s after it {dict(after)}, "
        f"max latency {tally.max_latency():.3f} s"
    )
    assert set(before) <= {"200", "503"}, before
    # The deadline bounds every answer; the slack is for a busy machine's scheduling only.
    assert tally.max_latency() < DEADLINE_S + 5.0
    assert set(after) == {"200"} and after["200"] >= AFTER_DETECTION, after
