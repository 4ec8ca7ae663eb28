"""`widebeam catalog serve` and `widebeam catalog upload` as real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC
from tests.support.output_lines import OutputLines
from widebeam.cli import build_parser, main
from widebeam.services.catalog import cli as catalog_cli
from widebeam.services.catalog.service.settings import redact_url

LISTENING = re.compile(r"catalog service listening on (http://\S+)")
KEY = "cli-Secret-Key-0451"


def _widebeam(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "widebeam", "catalog", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[str, list[str]]]:
    """A `widebeam catalog serve` process: (its URL, its log lines so far)."""
    env = os.environ | {"WIDEBEAM_CATALOG_API_KEY": KEY, "WIDEBEAM_CATALOG_PORT": "1"}
    command = [sys.executable, "-m", "widebeam", "catalog", "serve", "--port", "0",
               "--redis-url", redis_url, "--sid-layout", LAYOUT_SPEC]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stderr=subprocess.STDOUT, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    output = OutputLines(proc.stdout)
    yield output.wait_for(LISTENING, proc, timeout=30)[1], output.lines
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert KEY not in "".join(output.drain())  # the key is never logged


def _in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`widebeam catalog ...` via main() (saves a ~1.5 s interpreter start per call)."""
    code = main(["catalog", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_upload_command_against_serve_command(
    served: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, _ = served
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")  # the picked port
    catalog = tmp_path / "catalog.parquet"
    catalog.write_bytes(cw.parquet())
    monkeypatch.setenv("WIDEBEAM_CATALOG_URL", url)
    monkeypatch.delenv("WIDEBEAM_CATALOG_API_KEY", raising=False)
    code, _, err = _in_process(capsys, "upload", str(catalog), "--name", "shop")
    assert code == 1 and "401" in err and KEY not in err
    code, _, err = _in_process(capsys, "upload", str(catalog), "--name", "shop", "--api-key", "no")
    assert code == 1 and "invalid API key" in err

    env = os.environ | {"WIDEBEAM_CATALOG_API_KEY": KEY}
    done = _widebeam("upload", str(catalog), "--name", "shop", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["version"] == 1 and result["activated"] and result["format"] == "parquet"

    staged = _widebeam("upload", str(catalog), "--name", "shop", "--no-activate", "--url", url,
                       "--metadata", '{"by": "cli"}', "--api-key", KEY)  # fmt: skip
    assert staged.returncode == 0, staged.stderr
    assert json.loads(staged.stdout)["activated"] is False
    info = httpx.get(f"{url}/v1/catalogs/shop").json()
    assert info["current_version"] == 1 and info["versions"] == [1, 2]
    meta = httpx.get(f"{url}/v1/catalogs/shop/versions/2").json()["metadata"]
    assert meta["by"] == "cli" and meta["source"]["filename"] == "catalog.parquet"

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"item_id": "a", "sid": [1, 2, 3]}\n{"item_id": "b", "sid": [1, 2, 16]}\n')
    monkeypatch.setenv("WIDEBEAM_CATALOG_API_KEY", KEY)
    code, _, err = _in_process(capsys, "upload", str(bad), "--name", "shop")
    assert code == 1 and "422" in err and "line 2" in err and "'b'" in err
    code, _, err = _in_process(capsys, "upload", str(tmp_path / "nope.csv"), "--name", "shop")
    assert code == 2 and "no such file" in err
    assert httpx.get(f"{url}/v1/catalogs/shop").json()["versions"] == [1, 2]


def test_upload_layout_from_model_dir(
    served: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = served
    vocab = {f"<s_{chr(97 + lvl)}_{c}>": 500 + 40 * lvl + c for lvl in range(3) for c in range(16)}
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    catalog = tmp_path / "c.jsonl.gz"
    catalog.write_bytes(cw.gz(cw.jsonl()))
    code, out, err = _in_process(capsys, "upload", str(catalog), "--name", "m", "--model",
                                 str(tmp_path), "--url", url, "--api-key", KEY)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["layout"]["spec"] == "500:16,540:16,580:16"
    code, _, err = _in_process(capsys, "upload", str(catalog), "--name", "m", "--model",
                               str(tmp_path / "none"), "--url", url)  # fmt: skip
    assert code != 0 and "none" in err


def test_serve_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_CATALOG_PORT", "9999")
    monkeypatch.setenv("WIDEBEAM_CATALOG_RETAIN", "3")
    monkeypatch.setenv("WIDEBEAM_CATALOG_API_KEY", KEY)
    args = build_parser().parse_args(
        ["catalog", "serve", "--port", "8123", "--redis-url", "rediss://:pw@h:6380/1"]
    )
    settings = catalog_cli.serve_settings(args)
    assert (settings.port, settings.retain, settings.redis_url) == (
        8123,
        3,
        "rediss://:pw@h:6380/1",
    )
    assert settings.api_key is not None and settings.api_key.get_secret_value() == KEY
    assert redact_url(settings.redis_url) == "rediss://:***@h:6380/1"
    bad = build_parser().parse_args(["catalog", "serve", "--redis-url", "http://x"])
    with pytest.raises(ValueError, match="redis_url"):
        catalog_cli.serve_settings(bad)
