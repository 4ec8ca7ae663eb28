"""`widebeam gateway serve`: flags override `WIDEBEAM_GATEWAY_*` environment variables."""

from __future__ import annotations

import argparse

from widebeam.services.gateway.settings import ALL_MODEL_NAMES, EVENT_LOOPS, GatewaySettings
from widebeam.settings_cli import add_serve_command, settings_from_flags

# flag dest -> settings field (flags left unset fall back to the environment, then defaults)
_FIELDS = {
    "host": "host",
    "port": "port",
    "decoder": "decoders",
    "redis_url": "redis_url",
    "api_key": "api_keys",
    "model_name": "model_name",
    "served_model_name": "served_model_names",
    "default_constrained": "default_constrained",
    "model_dir": "model_dir",
    "items_file": "items_file",
    "max_beam_width": "max_beam_width",
    "max_n": "max_n",
    "max_history": "max_history",
    "max_tokens": "max_tokens",
    "max_body_bytes": "max_body_bytes",
    "request_timeout": "request_timeout_s",
    "max_in_flight_per_decoder": "max_in_flight_per_decoder",
    "workers": "workers",
    "event_loop": "event_loop",
    "log_level": "log_level",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="gateway_command", required=True)
    serve = add_serve_command(commands, GatewaySettings, "run the REST gateway (HTTP)")
    add = serve.add_argument
    add("--decoder", help="decoder addresses HOST:PORT,... [WIDEBEAM_GATEWAY_DECODERS]")
    add("--redis-url", help="Redis of the batch jobs [WIDEBEAM_GATEWAY_REDIS_URL]")
    add(
        "--api-key",
        action="append",
        help="accepted Bearer key; repeat for several [WIDEBEAM_GATEWAY_API_KEYS, comma-separated]",
    )
    add("--model-name", help="model name to report (default: the decoder's)")
    add(
        "--served-model-name",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="more names clients may give as `model`, e.g. flashrec; repeatable "
        "[WIDEBEAM_GATEWAY_SERVED_MODEL_NAMES, comma-separated]",
    )
    add(
        "--default-constrained",
        nargs="*",
        metavar="NAME",
        help="completions/chat requests that never say `constrained` are catalog-constrained: "
        "for these served model names, or for every name when none is given "
        "[WIDEBEAM_GATEWAY_DEFAULT_CONSTRAINED: names or '*']",
    )
    add("--model-dir", help="tokenizer directory (default: the decoder's model path)")
    add(
        "--items-file",
        help="catalog file with item titles for /v1/items and the playground "
        "[WIDEBEAM_GATEWAY_ITEMS_FILE]",
    )
    add("--max-beam-width", type=int)
    add("--max-n", type=int)
    add("--max-history", type=int)
    add("--max-tokens", type=int)
    add("--max-body-bytes", type=int)
    add("--request-timeout", type=float, help="seconds one HTTP request may take")
    add(
        "--max-in-flight-per-decoder",
        type=int,
        help="requests one decoder gets at once; beyond it on all of them: 429 (default 128)",
    )
    add(
        "--workers",
        type=int,
        help="gateway processes on the one port, each with its own decoder pool (default 1) "
        "[WIDEBEAM_GATEWAY_WORKERS]",
    )
    add(
        "--event-loop",
        choices=EVENT_LOOPS,
        help="each gateway process's event loop (default asyncio) [WIDEBEAM_GATEWAY_EVENT_LOOP]",
    )
    add("--log-level", help="DEBUG, INFO, WARNING, ...")
    serve.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> GatewaySettings:
    if getattr(args, "default_constrained", None) == []:  # the bare flag: every served name
        args = argparse.Namespace(**(vars(args) | {"default_constrained": [ALL_MODEL_NAMES]}))
    return settings_from_flags(GatewaySettings, args, _FIELDS, "gateway")


def serve(settings: GatewaySettings) -> None:
    from widebeam.services.gateway.serving import configure_logging
    from widebeam.services.gateway.serving import serve as serve_http

    configure_logging(settings)
    serve_http(settings)


def run(args: argparse.Namespace) -> int:
    serve(settings_from_args(args))
    return 0
