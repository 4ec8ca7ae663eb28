"""Runs one bench script at its CPU smoke size, as a user would (`python SCRIPT --smoke` in
bench/), with its output folder and model cache under the test's tmp_path; or loads a bench
module (bench/ is not a package) for tests of its functions."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run_smoke(
    script: str,
    tmp_path: Path,
    *args: str,
    timeout: float = 600,
    own_tmpdir: bool = False,
    tag: str = "",
    report: str | None = None,
) -> tuple[dict[str, Any], str]:
    """The script's JSON report (`$OUT/<script stem><tag>.json`, or `$OUT/<report>.json` for a
    script that names it by its options) and its stdout; fails the test with the end of its
    output when it exits non-zero. `own_tmpdir`: TMPDIR is tmp_path too (for scripts that write
    their work files to the temporary directory); `tag`: the script's --tag."""
    out = tmp_path / "out"
    env = os.environ | {"OUT": str(out), "WIDEBEAM_BENCH_CACHE": str(tmp_path)}
    if own_tmpdir:
        env["TMPDIR"] = str(tmp_path)
    cmd = [sys.executable, script, "--smoke", *args, *(["--tag", tag] if tag else [])]
    done = subprocess.run(cmd, cwd=BENCH, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    name = report or f"{Path(script).stem}{tag}"
    return json.loads((out / f"{name}.json").read_text()), done.stdout


def load_bench_module(name: str) -> ModuleType:
    """bench/<name>.py as a module; the other bench modules it imports load from bench/, as
    they do when the script runs there. bench/ is on the import path only while it loads: its
    script names (kernels.py) would hide installed packages from the rest of the session."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up while the class is built)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
