"""`widebeam up --max-beam-width` end to end: the decoder gets rows and limits for the beam, the
gateway its limits (max_n following), the worker its widening cap, and a beam of that width
with n = beam comes back through /generate."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import start_stack

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")
WIDE = 1100  # above the decoder's default rows (1024) and the gateway's default limits (512)


def _child_with(parent: int, needle: bytes) -> int:
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True)
    found = [
        int(pid) for pid in out.stdout.split()
        if needle in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]  # fmt: skip
    assert len(found) == 1, (needle, found)
    return found[0]


def test_max_beam_width_reaches_every_child(sid_model: SidModel, tmp_path: Path) -> None:
    port = free_port()
    proc, log = start_stack(
        sid_model.model_dir, sid_model.catalog_path, port, tmp_path, "--max-beam-width", str(WIDE)
    )
    try:
        decoder = _child_with(proc.pid, b"widebeam\0decoder\0serve")
        argv = Path(f"/proc/{decoder}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"--max-rows") + 1] == str(WIDE).encode()
        worker = _child_with(proc.pid, b"widebeam\0worker")
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
        assert f"WIDEBEAM_BATCH_MAX_BEAM_WIDTH={WIDE}".encode() in environ
        base = f"http://127.0.0.1:{port}"
        model = httpx.get(f"{base}/v1/models", timeout=60).json()["data"][0]
        assert model["max_beam_width"] == WIDE
        params = {"n": WIDE, "max_new_tokens": 2, "ignore_eos": True}
        body = {"input_ids": [1, 2, 3], "sampling_params": params}
        answer = httpx.post(f"{base}/generate", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["meta_info"]["beam_results"]) == WIDE
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0, log.read_text()[-3000:]
