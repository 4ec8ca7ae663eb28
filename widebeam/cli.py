"""The `widebeam` command: one entry point, a sub-command per service or tool."""

from __future__ import annotations

import argparse
import sys

from widebeam.services.decoder import cli_generate
from widebeam.services.decoder.server import cli as decoder_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="widebeam", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser(
        "generate", help="run JSONL generation requests through the engine (batched together)"
    )
    cli_generate.add_arguments(generate)
    generate.set_defaults(handler=cli_generate.run)
    decoder = commands.add_parser("decoder", help="the decoder service (gRPC)")
    decoder_cli.add_arguments(decoder)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"widebeam {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
