"""The `widebeam` command: one entry point, a sub-command per service or tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from widebeam.demo import cli as demo_cli
from widebeam.eval import cli as eval_cli
from widebeam.launcher import up as up_cli
from widebeam.loadgen import cli as loadgen_cli
from widebeam.services.catalog import cli as catalog_cli
from widebeam.services.catalog.sids import cli as sids_cli
from widebeam.services.decoder import cli_generate
from widebeam.services.decoder.server import cli as decoder_cli
from widebeam.services.gateway import cli as gateway_cli
from widebeam.services.gateway.batch import cli as worker_cli


def _generate_arguments(parser: argparse.ArgumentParser) -> None:
    cli_generate.add_arguments(parser)
    parser.set_defaults(handler=cli_generate.run)


def _catalog_arguments(parser: argparse.ArgumentParser) -> None:
    sids_cli.register(catalog_cli.add_arguments(parser))


# Sub-command, its one-line help, and what adds its arguments (and its handler), in --help order.
SUBCOMMANDS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], object]], ...] = (
    ("generate", "run JSONL generation requests through the engine (batched together)",
     _generate_arguments),
    ("decoder", "the decoder service (gRPC)", decoder_cli.add_arguments),
    ("catalog", "the catalog service (HTTP) and its client", _catalog_arguments),
    ("gateway", "the REST gateway (HTTP)", gateway_cli.add_arguments),
    ("worker", "the Celery worker of the batch jobs", worker_cli.add_arguments),
    ("up", "run the whole stack locally (redis, catalog, decoder, gateway, worker)",
     up_cli.add_arguments),
    ("demo", "the demo recommender (synthetic data, tiny model)", demo_cli.add_arguments),
    ("loadgen", "drive a gateway with load and check answers", loadgen_cli.add_arguments),
    ("eval", "recall / NDCG / MRR / hit at K, invalid SIDs, QPS of a running gateway",
     eval_cli.add_arguments),
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="widebeam", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, summary, add_arguments in SUBCOMMANDS:
        add_arguments(commands.add_parser(name, help=summary))
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
