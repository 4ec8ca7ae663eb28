"""`widebeam demo build [--out DIR]`: build or reuse the demo model and catalog, print where."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    commands = parser.add_subparsers(dest="demo_command", required=True)
    build = commands.add_parser(
        "build", help="synthetic data -> SIDs -> catalog -> train a tiny Qwen3 on CPU -> eval"
    )
    add = build.add_argument
    add("--out", default=".cache/demo", help="artifact directory (default .cache/demo)")
    add("--force", action="store_true", help="rebuild even when the cached artifacts match")
    add("--tiny", action="store_true", help="a seconds-long toy build (tests, smoke checks)")
    add("--no-progress", action="store_true", help="no progress bars (data, training, evaluation)")
    build.set_defaults(handler=run_build)
    return commands


def run_build(args: argparse.Namespace) -> int:
    from widebeam.demo.build import build_demo
    from widebeam.demo.config import DemoConfig, tiny_config

    cfg = tiny_config() if args.tiny else DemoConfig()
    art = build_demo(args.out, cfg, force=args.force, progress=not args.no_progress)
    state = "built" if art.rebuilt else "cached (inputs unchanged)"
    print(f"demo artifacts {state} in {art.root}")
    print(art.eval_table())
    print(f"model: {art.model_dir}")
    print(f"catalog: {art.catalog}")
    return 0
