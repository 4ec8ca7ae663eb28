"""`widebeam catalog serve` (the HTTP service) and `widebeam catalog upload` (its client).

Every flag of ``serve`` overrides a ``WIDEBEAM_CATALOG_*`` variable; ``upload`` reads
``WIDEBEAM_CATALOG_URL`` and ``WIDEBEAM_CATALOG_API_KEY`` (prefer the variable to ``--api-key``:
command lines are visible to other users in ``ps``).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from widebeam.settings_cli import add_serve_command, settings_from_flags

if TYPE_CHECKING:  # the service package imports FastAPI: only load it for these commands
    from widebeam.services.catalog.service.settings import CatalogSettings

# flag dest -> CatalogSettings field (unset flags fall back to the environment, then defaults)
_SERVE_FIELDS = {
    "host": "host",
    "port": "port",
    "redis_url": "redis_url",
    "api_key": "api_key",
    "namespace": "namespace",
    "max_upload_bytes": "max_upload_bytes",
    "retain": "retain",
    "sid_layout": "sid_layout",
    "model": "model_dir",
    "log_level": "log_level",
}
DEFAULT_URL = "http://127.0.0.1:8300"


def add_arguments(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """Adds `serve` and `upload`; returns the sub-command group so other commands can join it."""
    from widebeam.services.catalog.service.settings import CatalogSettings

    commands = parser.add_subparsers(dest="catalog_command", required=True)
    serve = add_serve_command(commands, CatalogSettings, "run the catalog HTTP service")
    add = serve.add_argument
    add("--redis-url", help="redis://[:PASSWORD@]HOST:PORT/DB or rediss:// for TLS")
    add("--api-key", help="require 'Authorization: Bearer KEY' on writes (prefer the env var)")
    add("--namespace", help="Redis key namespace of the catalog store (default widebeam)")
    add("--max-upload-bytes", type=int, help="request body limit (default 1 GiB)")
    add("--retain", type=int, help="versions kept per catalog (default 5)")
    add("--sid-layout", help="default layout BASE:SIZE,...[;begin=ID;end=ID]")
    add("--model", help="default layout inferred from this model's tokenizer")
    add("--log-level", help="DEBUG, INFO, WARNING, ...")
    serve.set_defaults(handler=run_serve)

    upload = commands.add_parser("upload", help="upload a catalog file to the catalog service")
    add = upload.add_argument
    add("file", help="catalog file: JSONL, CSV, Parquet, FlashRec or sid2pid JSON (gzip ok)")
    add("--name", required=True, help="catalog name (A-Z a-z 0-9 _ . -)")
    add("--format", help="input format (default: detected by the service)")
    add("--url", default=os.environ.get("WIDEBEAM_CATALOG_URL", DEFAULT_URL),
        help=f"service URL [WIDEBEAM_CATALOG_URL] (default {DEFAULT_URL})")  # fmt: skip
    layout = upload.add_mutually_exclusive_group()
    layout.add_argument("--sid-layout", help="BASE:SIZE,...[;begin=ID;end=ID]")
    layout.add_argument("--model", help="infer the SID layout from this model's tokenizer")
    add("--codebook-size", type=int, help="C of sid2pid keys a*C^2+b*C+c (OpenOneRec: 8192)")
    add("--metadata", help="JSON object stored in the version's manifest")
    add("--api-key", help="bearer key [WIDEBEAM_CATALOG_API_KEY]")
    add("--no-activate", action="store_true", help="publish without making it current")
    add("--timeout", type=float, default=600.0, help="seconds to wait for the service")
    add("--no-progress", action="store_true", help="no progress bar")
    upload.set_defaults(handler=run_upload)
    return commands


def serve_settings(args: argparse.Namespace) -> CatalogSettings:
    from widebeam.services.catalog.service.settings import CatalogSettings

    return settings_from_flags(CatalogSettings, args, _SERVE_FIELDS, "catalog")


def run_serve(args: argparse.Namespace) -> int:
    from widebeam.services.catalog.service.server import run

    run(serve_settings(args))
    return 0


def run_upload(args: argparse.Namespace) -> int:
    from widebeam.services.catalog.service.client import upload_from_args

    return upload_from_args(args)
