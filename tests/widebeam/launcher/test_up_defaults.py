"""`widebeam up`'s default ports are the ones the README and the services document (checked
without binding them: other things may hold them while tests run), `--help` shows every
default, and a fixed port that is taken stops the launch at once, naming the flag."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from widebeam.cli import build_parser
from widebeam.launcher.ports import DEFAULT_PORTS
from widebeam.services.catalog import cli as catalog_cli
from widebeam.services.catalog.service.settings import CatalogSettings
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.gateway.settings import GatewaySettings

REPO = Path(__file__).resolve().parents[3]
UP = [sys.executable, "-m", "widebeam", "up"]


def _up_defaults() -> dict[str, object]:
    args = build_parser().parse_args(["up", "--model", "m"])
    return vars(args)


def test_default_ports_are_the_services_and_the_upload_clients() -> None:
    up = _up_defaults()
    assert (up["port"], up["catalog_port"], up["decoder_port"], up["redis_port"]) == (
        8000,
        8300,
        50051,
        6380,
    )
    assert up["port"] == GatewaySettings.model_fields["port"].default
    assert up["catalog_port"] == CatalogSettings.model_fields["port"].default
    assert up["decoder_port"] == DecoderSettings.model_fields["port"].default
    # The documented `widebeam catalog upload FILE --name default` (no --url) reaches it.
    assert urlsplit(catalog_cli.DEFAULT_URL).port == up["catalog_port"]
    assert up["no_persist"] is False and up["decoder_threads"] == 1


def test_readme_documents_the_default_ports() -> None:
    readme = (REPO / "README.md").read_text()
    table = {
        row.group(1): row.group(2)
        for row in re.finditer(r"^\| (\w[\w ()]*?) \| `(\S+)` \|", readme, re.MULTILINE)
    }
    assert table["gateway"] == f"http://127.0.0.1:{DEFAULT_PORTS.gateway}"
    assert table["API docs"] == f"http://127.0.0.1:{DEFAULT_PORTS.gateway}/docs"
    assert table["metrics"] == f"http://127.0.0.1:{DEFAULT_PORTS.gateway}/metrics"
    assert table["catalog service"] == f"http://127.0.0.1:{DEFAULT_PORTS.catalog}"
    assert table["decoder (gRPC)"] == f"127.0.0.1:{DEFAULT_PORTS.decoder}"
    assert table["Redis"] == f"redis://127.0.0.1:{DEFAULT_PORTS.redis}/0"


def test_help_shows_every_default_but_no_secret() -> None:
    env = {"WIDEBEAM_API_KEY": "key-from-env-4f1c", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([*UP, "--help"], capture_output=True, text=True, env=env, check=True)
    text = " ".join(out.stdout.split())  # argparse wraps lines
    for default in ("8000", "8300", "50051", "6380", "127.0.0.1", "cpu", "600.0"):
        assert f"(default: {default})" in text, default
    assert "(default: 5)" in text and "(default: 1)" in text  # restarts, decoder threads
    assert re.search(r"\[WIDEBEAM_STATE_DIR\] \(default: \S+/widebeam\)", text)
    assert "key-from-env-4f1c" not in out.stdout


def test_a_taken_port_stops_the_launch_naming_its_flag(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = [*UP, "--model", str(tmp_path), "--port", "0", "--decoder-port", "0",
                "--redis-port", "0", "--catalog-port", str(port),
                "--state-dir", str(tmp_path / "state")]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"catalog service port {port} (--catalog-port)" in out.stderr
    assert "redis" not in out.stdout  # nothing was started
