"""The checked-in stubs are exactly what `proto/generate.py` produces from the .proto."""

from __future__ import annotations

from pathlib import Path

import pytest

from widebeam.services.decoder.proto import generate

pytest.importorskip("grpc_tools", reason="grpcio-tools (a dev dependency) regenerates the stubs")


def test_checked_in_stubs_are_in_sync(tmp_path: Path) -> None:
    written = generate.generate(tmp_path)
    assert len(written) == 3 * len(generate.PROTOS)
    for fresh in written:
        checked_in = generate.PROTO_ROOT / fresh.relative_to(tmp_path)
        assert checked_in.is_file(), f"{checked_in} is missing"
        assert checked_in.read_text() == fresh.read_text(), (
            f"{checked_in.name} is stale: run python -m widebeam.services.decoder.proto.generate"
        )
