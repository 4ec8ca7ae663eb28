"""A service's CLI flags and its pydantic settings: flags derived from the settings' fields, and
the settings built from the flags (flags win over environment). Secrets (`SecretStr` fields)
get no flag: a command line is visible to every local user (`ps`), so they come from the
environment or a file only."""

from __future__ import annotations

import argparse
import types
from collections.abc import Mapping
from enum import Enum
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

S = TypeVar("S", bound=BaseSettings)


def add_settings_flags(
    parser: argparse.ArgumentParser, cls: type[BaseSettings], flags: Mapping[str, str]
) -> dict[str, str]:
    """One flag per field of `cls` but its secrets: `--field-name` (or `flags[field]`), typed
    from the field's annotation (booleans get `--x` / `--no-x`), its help the field's
    description, default and environment variable. Every flag's dest is its field; returns that
    dest -> field mapping for `settings_from_flags`."""
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    flagged = {n: i for n, i in cls.model_fields.items() if not _is_secret(i.annotation)}
    for name, info in flagged.items():
        flag = flags.get(name, "--" + name.replace("_", "-"))
        parser.add_argument(
            flag, dest=name, default=None, help=_help(info, prefix + name.upper()),
            **_value_options(info.annotation),
        )  # fmt: skip
    return {name: name for name in flagged}


def add_serve_command(
    commands: argparse._SubParsersAction, cls: type[BaseSettings], help: str
) -> argparse.ArgumentParser:
    """A service's `serve` sub-command with its `--host` and `--port`, whose help shows the
    defaults and the environment variable `cls` reads them from."""
    serve: argparse.ArgumentParser = commands.add_parser("serve", help=help)
    prefix = str(cls.model_config.get("env_prefix", "")).upper()
    host, port = (cls.model_fields[name].get_default() for name in ("host", "port"))
    serve.add_argument("--host", help=f"bind address (default {host}) [{prefix}HOST]")
    serve.add_argument("--port", type=int, help=f"port (default {port}; 0 = a free one, logged)")
    return serve


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or SecretStr in get_args(annotation)


def _help(info: FieldInfo, variable: str) -> str:
    text = info.description or ""
    default = info.get_default()
    if not info.is_required() and default is not None:
        shown = default.value if isinstance(default, Enum) else default
        text += f" (default {str(shown).lower() if isinstance(shown, bool) else shown})"
    return f"{text} [{variable}]".strip().replace("%", "%%")


def _value_options(annotation: Any) -> dict[str, Any]:
    """argparse options for a value of this type (lists stay text: the settings split them)."""
    if get_origin(annotation) in (Union, types.UnionType):
        present = [a for a in get_args(annotation) if a is not type(None)]
        annotation = present[0] if len(present) == 1 else str
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {"choices": [member.value for member in annotation]}
    if get_origin(annotation) is Literal:
        return {"choices": list(get_args(annotation))}
    if annotation in (int, float):
        return {"type": annotation}
    return {}


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
