"""How long `widebeam decoder serve` takes to answer its first call on workload 3's model and
catalog, with the start-up capture list (`--capture-at-start`, the default) and without it, at
each `--max-rows`: the time an operator's start-up probe must allow, and what capturing before
ready costs. Each row quotes the decoder's own log line (graphs captured, start-up buckets,
seconds) beside the wall time from launch to the first answered GetInfo.

    python bench/decoder_startup.py [--max-rows 1024,8192] [--capture on,off]
    python bench/decoder_startup.py --smoke   # CPU: the tiny model (no graphs to capture)
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from cache_dir import add_cache_argument
from catalogs import random_catalog
from e2e import DecoderProcess
from harness import DEVICE, environment, markdown_table, model_dir, write_json
from stack import SMOKE_LEVELS, W3_LEVELS, smoke_model

CAPTURED = re.compile(r"captured (\d+) CUDA graphs for (\d+) start-up buckets in ([0-9.]+) s")
CAPTURE_FLAGS = {"on": "--capture-at-start", "off": "--no-capture-at-start"}


def start_once(
    model: Path, catalog: Path, max_rows: int, max_kv_slots: int, capture: str, timeout: float
) -> dict[str, object]:
    """One decoder started and stopped: seconds to its first answered call, and its captures."""
    started = time.perf_counter()
    server = DecoderProcess(
        model, max_rows, max_kv_slots, "--catalog", str(catalog), CAPTURE_FLAGS[capture]
    )
    try:
        server.wait_ready(timeout)
        ready_s = time.perf_counter() - started
    finally:
        server.stop()
    found = CAPTURED.search(server.log.read_text())
    graphs, buckets, capture_s = (
        (int(found[1]), int(found[2]), float(found[3])) if found else (0, 0, 0.0)
    )
    return {
        "max_rows": max_rows,
        "capture_at_start": capture == "on",
        "ready_s": round(ready_s, 1),
        "graphs": graphs,
        "buckets": buckets,
        "capture_s": capture_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--max-rows", type=lambda s: [int(r) for r in s.split(",")], default=[1024, 8192]
    )
    parser.add_argument("--capture", default="on,off", help="on, off or both (comma-separated)")
    parser.add_argument("--max-kv-slots", type=int, default=131072)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for ready")
    parser.add_argument("--smoke", action="store_true", help="CPU: the tiny model, 64 rows")
    add_cache_argument(parser)
    args = parser.parse_args()
    captures = args.capture.split(",")
    unknown = sorted(set(captures) - set(CAPTURE_FLAGS))
    if unknown:
        parser.error(f"--capture takes on and off, not {', '.join(unknown)}")
    if args.smoke:
        model, catalog = smoke_model(args.cache), random_catalog(400, SMOKE_LEVELS)
        args.max_rows, args.max_kv_slots = [64], 16384
    else:
        model = model_dir("qwen3-1.7b", sid_levels=W3_LEVELS)
        catalog = random_catalog(430_000, W3_LEVELS)
    rows = [
        start_once(model, catalog, max_rows, args.max_kv_slots, capture, args.timeout)
        for max_rows in args.max_rows
        for capture in captures
    ]
    headers = ["max rows", "capture at start", "ready s", "graphs", "buckets", "capture s"]
    print(markdown_table(headers, [list(row.values()) for row in rows]), flush=True)
    env = environment() | {"device": DEVICE, "max_kv_slots": args.max_kv_slots}
    write_json("decoder_startup", {"env": env, "rows": rows})


if __name__ == "__main__":
    main()
