"""The `widebeam` command: one entry point, a sub-command per service or tool.

A sub-command's module is imported only when that sub-command runs (or a caller builds the
whole parser): the services' modules pull in FastAPI, gRPC, torch or Celery, and a process that
runs one of them should not pay for the others' imports."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence


def _generate_arguments(parser: argparse.ArgumentParser) -> None:
    from widebeam.services.decoder import cli_generate

    cli_generate.add_arguments(parser)
    parser.set_defaults(handler=cli_generate.run)


def _catalog_arguments(parser: argparse.ArgumentParser) -> None:
    from widebeam.services.catalog import cli as catalog_cli
    from widebeam.services.catalog.sids import cli as sids_cli

    sids_cli.register(catalog_cli.add_arguments(parser))


def _module_arguments(module: str) -> Callable[[argparse.ArgumentParser], object]:
    def add_arguments(parser: argparse.ArgumentParser) -> object:
        return importlib.import_module(module).add_arguments(parser)

    return add_arguments


# Sub-command, its one-line help, and what adds its arguments (and its handler), in --help order.
SUBCOMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], object]], ...] = (
    ("generate", "run JSONL generation requests through the engine (batched together)",
     _generate_arguments),
    ("decoder", "the decoder service (gRPC)",
     _module_arguments("widebeam.services.decoder.server.cli")),
    ("catalog", "the catalog service (HTTP) and its client", _catalog_arguments),
    ("gateway", "the REST gateway (HTTP)", _module_arguments("widebeam.services.gateway.cli")),
    ("worker", "the Celery worker of the batch jobs",
     _module_arguments("widebeam.services.gateway.batch.cli")),
    ("up", "run the whole stack locally (redis, catalog, decoder, gateway, worker)",
     _module_arguments("widebeam.launcher.up")),
    ("demo", "the demo recommender (synthetic data, tiny model)",
     _module_arguments("widebeam.demo.cli")),
    ("loadgen", "drive a gateway with load and check answers",
     _module_arguments("widebeam.loadgen.cli")),
    ("eval", "recall / NDCG / MRR / hit at K, invalid SIDs, QPS of a running gateway",
     _module_arguments("widebeam.eval.cli")),
)  # fmt: skip


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every sub-command's arguments, or with `only` just that one's (the others are listed
    with their help, their modules not imported)."""
    parser = argparse.ArgumentParser(prog="widebeam", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, summary, add_arguments in SUBCOMMANDS:
        sub = commands.add_parser(name, help=summary)
        if only is None or name == only:
            add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    names = {name for name, _, _ in SUBCOMMANDS}
    # The sub-command is the first argument (`widebeam --help` and mistakes need none).
    only = argv[0] if argv and argv[0] in names else ""
    args = build_parser(only).parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"widebeam {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
