"""`widebeam decoder serve`: flags override `WIDEBEAM_DECODER_*` environment variables."""

from __future__ import annotations

import argparse

from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.settings_cli import settings_from_flags

# flag dest -> settings field (flags left unset fall back to the environment, then defaults)
_FIELDS = {
    "model": "model",
    "catalog": "catalog_file",
    "sid_layout": "sid_layout",
    "device": "device",
    "dtype": "dtype",
    "host": "host",
    "port": "port",
    "redis_url": "redis_url",
    "catalogs": "catalogs",
    "catalog_namespace": "catalog_namespace",
    "max_rows": "max_rows",
    "max_kv_slots": "max_kv_slots",
    "max_model_len": "max_model_len",
    "max_waiting": "max_waiting",
    "max_message_bytes": "max_message_bytes",
    "grace_period": "grace_period_s",
    "log_level": "log_level",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="decoder_command", required=True)
    serve = commands.add_parser("serve", help="run the decoder gRPC server")
    add = serve.add_argument
    add("--model", help="HF model directory [WIDEBEAM_DECODER_MODEL]")
    add("--catalog", help="JSONL catalog served as 'default' [..._CATALOG_FILE]")
    add("--sid-layout", help="BASE:SIZE,...[;begin=ID;end=ID] (default: from the tokenizer)")
    add("--device", help="cpu | cuda | cuda:N (default cpu)")
    add("--dtype", choices=["float32", "bfloat16", "float16"])
    add("--host", help="bind address (default 127.0.0.1)")
    add("--port", type=int, help="port (default 50051; 0 = a free one, logged)")
    add("--redis-url", help="follow catalogs published in this Redis")
    add("--catalogs", help="comma-separated catalog names to follow (default: all)")
    add("--catalog-namespace", help="Redis key namespace of the catalog store")
    add("--max-rows", type=int, help="rows (beams) decoding at once")
    add("--max-kv-slots", type=int, help="KV cache size in tokens")
    add("--max-model-len", type=int, help="context length limit (default: the model's)")
    add("--max-waiting", type=int, help="queue limit; beyond it RESOURCE_EXHAUSTED")
    add("--max-message-bytes", type=int, help="gRPC message size limit")
    add("--grace-period", type=float, help="seconds in-flight RPCs get at shutdown")
    add("--log-level", help="DEBUG, INFO, WARNING, ...")
    serve.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> DecoderSettings:
    return settings_from_flags(DecoderSettings, args, _FIELDS, "decoder")


def run(args: argparse.Namespace) -> int:
    from widebeam.services.decoder.server.app import run as run_server  # imports torch, grpc

    run_server(settings_from_args(args))
    return 0
