"""tests/conftest.py's LONG_MODULES (what `make test`'s workers take first) names modules that
exist, each once: a module renamed or removed would otherwise drop silently to the end."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_MODULES

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_module_exists_once() -> None:
    assert len(set(LONG_MODULES)) == len(LONG_MODULES)
    missing = [module for module in LONG_MODULES if not (ROOT / module).is_file()]
    assert not missing, missing
