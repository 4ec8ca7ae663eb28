"""`widebeam catalog build-sids`: item embeddings -> RQ-KMeans SIDs -> a native JSONL catalog.

The catalog's SIDs use codes ``0..K_l-1`` per level, so the model needs SID tokens
``<s_a_0>..`` for each level with at least those codebook sizes.
"""

from __future__ import annotations

import argparse
import sys
import time

from widebeam.services.catalog.sids.io import load_embeddings, open_output, write_catalog_jsonl
from widebeam.services.catalog.sids.rq import build_sids


def register(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``build-sids`` to the ``catalog`` sub-command group."""
    parser = commands.add_parser(
        "build-sids", help="assign semantic IDs to items by residual k-means over embeddings"
    )
    add = parser.add_argument
    add("--embeddings", required=True, help="FILE.npy ([items, dim]) or FILE.parquet")
    add("--ids", help=".npy: text file with one item id per line (default: row numbers); "
        ".parquet: id column (default item_id)")  # fmt: skip
    add("--column", help=".parquet: embedding list column (default: 'embedding' or the only "
        "list column; else emb_0..emb_D-1 columns)")  # fmt: skip
    add("--levels", type=int, default=3, help="SID levels (default 3)")
    add("--codebook-size", type=int, default=256, help="codes per level (default 256)")
    add("--codebook-sizes", help="per-level sizes, e.g. 256,256,1024 (overrides the two above)")
    add("--seed", type=int, default=0, help="k-means seed (default 0)")
    add("--iters", type=int, default=15, help="Lloyd iterations per level at most (default 15)")
    add("--no-dedupe", action="store_true", help="keep colliding SIDs (items share a SID)")
    add("--out", default="-", help="output JSONL catalog (default: stdout)")
    parser.set_defaults(handler=run)
    return parser


def codebook_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    if args.codebook_sizes:
        try:
            sizes = tuple(int(s) for s in args.codebook_sizes.split(",") if s.strip())
        except ValueError:
            raise ValueError(
                f"--codebook-sizes {args.codebook_sizes!r}: need ints like 256,256"
            ) from None
    else:
        if args.levels < 1:
            raise ValueError(f"--levels must be >= 1, got {args.levels}")
        sizes = (args.codebook_size,) * args.levels
    if not sizes or min(sizes) < 1:
        raise ValueError(f"codebook sizes must be positive, got {list(sizes)}")
    if len(sizes) > 26:
        raise ValueError(f"at most 26 SID levels (<s_a_N>..<s_z_N>), got {len(sizes)}")
    return sizes


def run(args: argparse.Namespace) -> int:
    sizes = codebook_sizes(args)
    if args.iters < 1:
        raise ValueError(f"--iters must be >= 1, got {args.iters}")
    start = time.perf_counter()
    item_ids, emb = load_embeddings(args.embeddings, args.ids, args.column)
    result = build_sids(emb, sizes, seed=args.seed, iters=args.iters, dedupe=not args.no_dedupe)
    out = open_output(args.out)
    try:
        write_catalog_jsonl(out, item_ids, result.codes)
    finally:
        if out is not sys.stdout:
            out.close()
    elapsed = time.perf_counter() - start
    where = "stdout" if args.out == "-" else args.out
    print(f"build-sids: {result.stats.summary()}", file=sys.stderr)
    print(f"build-sids: wrote {len(item_ids)} items to {where} in {elapsed:.1f} s", file=sys.stderr)
    return 0
