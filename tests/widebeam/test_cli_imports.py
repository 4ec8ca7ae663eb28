"""`widebeam <command>` imports that command's modules only: a gateway process does not load
torch, the launcher or the decoder's gRPC stubs (each process of the stack used to import
every service's modules at start)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
from widebeam.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("torch", "widebeam.launcher.up", "fastapi", "grpc", "celery")
print(" ".join(sorted(m for m in heavy if m in sys.modules)) or "-")
"""


@pytest.mark.parametrize(
    ("argv", "imported"),
    [
        (["--help"], "-"),
        (["gateway", "serve", "--help"], "-"),  # its app is imported when it serves
        (["loadgen", "--help"], "-"),
        (["decoder", "--help"], "grpc"),  # its settings validate gRPC options
        (["catalog", "--help"], "fastapi"),
    ],
)
def test_a_command_imports_its_own_modules_only(argv: list[str], imported: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == imported, done.stdout[-2000:]


def test_an_unknown_command_is_refused_with_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "widebeam", "bogus"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "invalid choice: 'bogus'" in done.stderr and "'gateway'" in done.stderr
