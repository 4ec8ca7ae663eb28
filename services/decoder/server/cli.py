"""`widebeam decoder serve`: flags override `WIDEBEAM_DECODER_*` environment variables.

One flag per `DecoderSettings` field (so one per `EngineConfig` field too), derived from the
settings: `--max-rows` sets `max_rows`, `--no-cuda-graphs` sets `cuda_graphs` false. The bearer
token has none (`WIDEBEAM_DECODER_AUTH_TOKEN`, or `--auth-token-file`): `ps` shows argv.
"""

from __future__ import annotations

import argparse

from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.settings_cli import add_settings_flags, settings_from_flags

# settings field -> flag, where the flag is not the field's name
FLAG_NAMES = {"catalog_file": "--catalog", "grace_period_s": "--grace-period"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="decoder_command", required=True)
    # No abbreviations: `--auth-token SECRET` must not pass as `--auth-token-file SECRET`.
    serve = commands.add_parser("serve", help="run the decoder gRPC server", allow_abbrev=False)
    add_settings_flags(serve, DecoderSettings, FLAG_NAMES)
    serve.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> DecoderSettings:
    fields = {name: name for name in DecoderSettings.model_fields}  # each flag's dest
    return settings_from_flags(DecoderSettings, args, fields, "decoder")


def run(args: argparse.Namespace) -> int:
    from widebeam.services.decoder.server.app import run as run_server  # imports torch, grpc

    run_server(settings_from_args(args))
    return 0
