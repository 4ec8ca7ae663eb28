"""`bench/spy_summary.py` on a py-spy raw profile written the way py-spy writes one with
--subprocesses --threads: samples grouped by process (a spawned child's command holds ';')
and thread, self frames and the project's inclusive frames counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARENT = 'process 10:"python3 -m widebeam decoder serve --model m"'
CHILD = 'process 11:"python3 -B -c from multiprocessing.spawn import spawn_main; spawn_main(x)"'
PROFILE = "\n".join([
    f"{PARENT};thread (10): MainThread;run (services/decoder/server/app.py:189);"
    "encode_output (services/decoder/server/engine_wire.py:126) 30",
    f"{PARENT};thread (12): engine-loop;AsyncEngine._run (services/decoder/server/async_engine.py"
    ":209);Engine.step (services/decoder/engine.py:231);_ragged_rows (services/decoder/search/"
    "beam_search.py:248) 50",
    f"{PARENT};thread (12): engine-loop;AsyncEngine._run (services/decoder/server/async_engine.py"
    ":209);decode_inputs (services/decoder/runner/decode_inputs.py:26) 20",
    f"{PARENT};{CHILD};thread (11): MainThread;recommend_response (services/decoder/server/"
    "recommend.py:171) 40",
])  # fmt: skip


def test_samples_are_grouped_by_process_and_thread(tmp_path: Path) -> None:
    raw = tmp_path / "decoder.spy"
    raw.write_text(PROFILE + "\n")
    script = ROOT / "bench" / "spy_summary.py"
    out = subprocess.run(
        [sys.executable, str(script), str(raw), "--top", "5"],
        capture_output=True, text=True, check=True, cwd=ROOT / "bench",
    ).stdout  # fmt: skip
    headers = [line for line in out.splitlines() if line.startswith("## ")]
    assert headers == [
        "## decoder 10 / thread engine-loop: 70 samples",
        "## spawned child 11 / thread MainThread: 40 samples",
        "## decoder 10 / thread MainThread: 30 samples",
    ]
    engine = out.split("## ")[1]
    assert "50  71.4%  _ragged_rows (services/decoder/search/beam_search.py:248)" in engine
    assert "70 100.0%  AsyncEngine._run (services/decoder/server/async_engine.py:209)" in engine
    child = out.split("## ")[2]
    assert "40 100.0%  recommend_response (services/decoder/server/recommend.py:171)" in child
