"""`make demo DEMO_ONCE=1`, the README's first command, end to end (with the toy recommender,
DEMO_TINY=1): it builds (or reuses) the demo recommender, starts the stack, shows the examples
and exits 0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.redis_server import find_redis_server, free_port

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server"),
]


def test_make_demo_once(tmp_path: Path) -> None:
    # The toy build: the same commands and code paths in seconds; the full build's minutes of
    # training would make the suite's length depend on the machine's speed.
    env = {**os.environ, "DEMO_ONCE": "1", "DEMO_TINY": "1", "DEMO_PORT": str(free_port())}
    # Free ports and a state directory of its own: the defaults may be in use meanwhile.
    env["DEMO_UP_ARGS"] = (
        f"--catalog-port 0 --decoder-port 0 --redis-port 0 --state-dir {tmp_path / 'state'}"
    )
    done = subprocess.run(
        ["make", "demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    for expected in (
        "model: ",
        "catalog: ",
        "== POST /v1/recommend ==",
        "recommended (catalog",
        "== POST /v1/completions",
        "choice 3:",
        "== POST /v1/batch-jobs",
        "24/24 succeeded",
        "gateway: http://127.0.0.1:",
    ):
        assert expected in out, (expected, out[-4000:])
