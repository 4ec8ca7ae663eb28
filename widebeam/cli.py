"""The `widebeam` command: one entry point, a sub-command per service or tool."""

from __future__ import annotations

import argparse
import sys

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
    catalog = commands.add_parser("catalog", help="the catalog service (HTTP) and its client")
    sids_cli.register(catalog_cli.add_arguments(catalog))
    gateway = commands.add_parser("gateway", help="the REST gateway (HTTP)")
    gateway_cli.add_arguments(gateway)
    worker = commands.add_parser("worker", help="the Celery worker of the batch jobs")
    worker_cli.add_arguments(worker)
    up = commands.add_parser(
        "up", help="run the whole stack locally (redis, catalog, decoder, gateway, worker)"
    )
    up_cli.add_arguments(up)
    demo = commands.add_parser("demo", help="the demo recommender (synthetic data, tiny model)")
    demo_cli.add_arguments(demo)
    loadgen = commands.add_parser("loadgen", help="drive a gateway with load and check answers")
    loadgen_cli.add_arguments(loadgen)
    evaluate = commands.add_parser(
        "eval", help="recall / NDCG / MRR / hit at K, invalid SIDs, QPS of a running gateway"
    )
    eval_cli.add_arguments(evaluate)
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
