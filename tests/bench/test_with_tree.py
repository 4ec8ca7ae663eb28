"""bench/with_tree.py runs a bench script with `widebeam` (and `widebeam.services`) imported from
another tree, so one device call can time a change against the code before it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.bench.smoke import BENCH


def _run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "with_tree.py", *map(str, args)],
        cwd=BENCH, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_script_runs_on_the_other_trees_code(tmp_path: Path) -> None:
    """A copy of this checkout's packages with one function replaced: the script, run as
    __main__ with its own arguments, gets the copy's widebeam and widebeam.services."""
    root = BENCH.parent
    other = tmp_path / "other"
    for folder in ("widebeam", "services"):
        shutil.copytree(root / folder, other / folder, ignore=shutil.ignore_patterns("__pycache__"))
    spec = other / "services" / "decoder" / "requests" / "spec.py"
    spec.write_text(spec.read_text() + "\n\nTREE_MARK = 'other'\n")
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\n"
        "import widebeam\n"
        "from widebeam.services.decoder.requests import spec\n"
        "print(__name__, sys.argv[1:], spec.TREE_MARK, widebeam.__file__)\n"
    )
    run = _run(other, probe, "--quick", "--width", "50")
    assert run.returncode == 0, run.stderr
    first, second = run.stdout.splitlines()[:2]
    assert first == f"widebeam from {other / 'widebeam'}"
    assert (
        second
        == f"__main__ ['--quick', '--width', '50'] other {other / 'widebeam' / '__init__.py'}"
    )


def test_a_tree_or_script_that_is_not_there_is_named(tmp_path: Path) -> None:
    (tmp_path / "widebeam").mkdir()
    run = _run(tmp_path, "genrec_throughput.py")
    assert run.returncode != 0 and f"{tmp_path} has no services/ folder" in run.stderr
    run = _run(BENCH.parent, tmp_path / "missing.py")
    assert run.returncode != 0 and "no bench script" in run.stderr and "missing.py" in run.stderr
    run = _run(BENCH.parent)
    assert run.returncode != 0 and "usage: with_tree.py TREE SCRIPT" in run.stderr
