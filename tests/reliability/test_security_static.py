"""Security, checked in the source: constant-time key comparison, nothing unpickled from the
network (Celery JSON-only, no pickle/marshal/unsafe loaders), containers run as non-root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from widebeam.services.gateway.batch.celery_app import create_celery
from widebeam.services.gateway.batch.settings import BatchSettings

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    p
    for folder in ("services", "widebeam", "kernels", "deploy")
    for p in (ROOT / folder).rglob("*.py")
    if "/proto/widebeam/" not in str(p)  # generated protobuf stubs
)
AUTH_MODULES = [ROOT / "services/http/api_keys.py"]


def _code(path: Path) -> str:
    """The file without comments, so a comment that mentions pickle does not count."""
    return "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())


@pytest.mark.parametrize("path", AUTH_MODULES, ids=lambda p: p.parent.name)
def test_keys_are_compared_in_constant_time(path: Path) -> None:
    code = _code(path)
    assert "hmac.compare_digest(" in code
    # No ordinary comparison of a key/token/credential anywhere in the auth module.
    assert not re.search(r"(key|token|credential|given)\w*\s*[!=]=", code), path


def test_nothing_is_unpickled() -> None:
    unsafe = re.compile(
        r"\bimport pickle\b|\bfrom pickle\b|\bcPickle\b|\bdill\b|\bmarshal\.loads?\b|"
        r"\bshelve\b|\bjoblib\.load\b|\byaml\.load\(|\byaml\.unsafe_load\b|"
        r"allow_pickle\s*=\s*True|torch\.load\(|pd\.read_pickle\b"
    )
    found = [
        f"{p.relative_to(ROOT)}: {m.group()}" for p in SOURCES for m in unsafe.finditer(_code(p))
    ]
    assert not found, found
    assert len(SOURCES) > 100  # the scan did look at the tree


def test_celery_is_json_only() -> None:
    conf = create_celery(BatchSettings()).conf
    assert conf.task_serializer == "json" and conf.result_serializer == "json"
    assert list(conf.accept_content) == ["json"]
    assert list(conf.result_accept_content) == ["json"]
    # And no other module configures Celery serialization.
    mentions = [p for p in SOURCES if "accept_content" in _code(p)]
    assert [p.relative_to(ROOT).as_posix() for p in mentions] == [
        "services/gateway/batch/celery_app.py"
    ]


def test_containers_run_as_non_root() -> None:
    dockerfiles = sorted((ROOT / "deploy").rglob("Dockerfile*"))
    if not dockerfiles:
        pytest.skip("no Dockerfiles under deploy/ yet")
    for path in dockerfiles:
        lines = [ln.strip() for ln in path.read_text().splitlines()]
        last_from = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM "))
        users = [ln.split(None, 1)[1] for ln in lines[last_from:] if ln.upper().startswith("USER ")]
        assert users, f"{path.name}: the final stage has no USER line"
        user = users[-1].split(":")[0]
        assert user not in ("root", "0"), f"{path.name}: runs as {users[-1]}"
