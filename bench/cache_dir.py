"""Where the benches keep what they build once per machine (random-weight models, catalogs):
`$WIDEBEAM_BENCH_CACHE`, default /tmp/widebeam-bench."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

CACHE_ENV = "WIDEBEAM_BENCH_CACHE"
DEFAULT_CACHE = "/tmp/widebeam-bench"


def bench_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV, DEFAULT_CACHE))


def add_cache_argument(parser: argparse.ArgumentParser) -> None:
    """`--cache DIR`: where a CPU run's tiny model is written once (default: `bench_cache()`;
    a string, as results' JSON records the arguments)."""
    parser.add_argument("--cache", default=str(bench_cache()), help="smoke model directory")
