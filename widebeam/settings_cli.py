"""Building a service's pydantic settings from its CLI flags (flags win over environment)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

S = TypeVar("S", bound=BaseSettings)


def settings_from_flags(
    cls: type[S], args: argparse.Namespace, fields: Mapping[str, str], service: str
) -> S:
    """`fields` maps argparse dests to settings fields; unset flags fall back to the
    `WIDEBEAM_<SERVICE>_*` environment and the defaults. Invalid values become one ValueError
    naming every bad field (the CLI prints it and exits 2)."""
    given = {field: getattr(args, dest, None) for dest, field in fields.items()}
    try:
        return cls(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(
            f"invalid {service} settings: {problems} "
            f"(flags override WIDEBEAM_{service.upper()}_* variables)"
        ) from None
