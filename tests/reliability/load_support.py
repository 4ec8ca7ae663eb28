"""The stack of the load tests, every part its own process: `widebeam decoder serve` (tiny SID
model, one torch thread) and `widebeam gateway serve` in front of it; `widebeam loadgen` drives
it from a third process, so the client never shares a GIL with what it measures."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.reliability.support import ROOT, WIDEBEAM, listening_url, process, wait_http
from tests.services.decoder.conftest import SidModel

REQUEST_TIMEOUT_S = 5.0  # the gateway's deadline per request
MAX_IN_FLIGHT = 32  # the gateway's max_in_flight_per_decoder
# One intra-op thread: on 2 cores the tiny model's ops are too small to gain from two, and the
# extra thread fights the gRPC loop, the gateway and the client for the same cores.
DECODER_ENV = {"OMP_NUM_THREADS": "1"}


@dataclass(frozen=True)
class LoadStack:
    url: str
    decoder_pid: int
    catalog_path: Path
    workdir: Path


@contextmanager
def load_stack(sid_model: SidModel, workdir: Path) -> Iterator[LoadStack]:
    with ExitStack() as stack:
        dec_log = workdir / "decoder.log"
        args = ["decoder", "serve", "--model", str(sid_model.model_dir), "--catalog",
                str(sid_model.catalog_path), "--port", "0"]  # fmt: skip
        decoder = stack.enter_context(process(args, DECODER_ENV, dec_log, "decoder serving on"))
        line = next(ln for ln in dec_log.read_text().splitlines() if "decoder serving on" in ln)
        address = line.rsplit(" ", 1)[1].strip()
        gw_log = workdir / "gateway.log"
        args = ["gateway", "serve", "--port", "0", "--decoder", address,
                "--request-timeout", str(REQUEST_TIMEOUT_S),
                "--max-in-flight-per-decoder", str(MAX_IN_FLIGHT)]  # fmt: skip
        stack.enter_context(process(args, {}, gw_log, "gateway listening on"))
        url = listening_url(gw_log, "gateway listening on")
        assert wait_http(f"{url}/readyz").status_code == 200
        yield LoadStack(url, decoder.pid, sid_model.catalog_path, workdir)


def loadgen(stack: LoadStack, name: str, *args: str, timeout: float = 300) -> dict[str, Any]:
    """Run `widebeam loadgen` against the stack; its JSON report (output printed for -s)."""
    report = stack.workdir / f"{name}.json"
    cmd = [*WIDEBEAM, "loadgen", "--url", stack.url, "--items-file", str(stack.catalog_path),
           "--json", str(report), *args]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    print(f"\n$ widebeam loadgen {' '.join(args)}\n{done.stdout}{done.stderr[-3000:]}")
    assert report.exists(), f"loadgen wrote no report (exit {done.returncode})"
    result: dict[str, Any] = json.loads(report.read_text())
    result["exit_code"] = done.returncode
    return result


def phase(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in report["phases"] if p["name"] == name)
    return found
