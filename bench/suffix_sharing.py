"""How much of a wide beam's generated-token KV its rows share (run on the GPU machine; CPU
with --smoke): the upper bound on what a tree-aware suffix kernel could save.

Rows of one request point at the same cache slot wherever they share an ancestor, yet the
decode kernel reads each row's suffix on its own. This script runs one workload-1 request
(random-weight model, beam = n) and, at chosen suffix lengths L, reads the request's suffix
table [rows, L] and reports:

- `distinct_at_depth`: distinct slots in each column (ancestors at that depth);
- `unique_read_fraction`: distinct (row-independent) slots ÷ rows × L, the least a kernel
  that reads every shared slot once could read;
- `split_read_fraction[r]`: what a two-level kernel reads (the part older than the last r
  tokens once per distinct ancestor at depth L - r, the last r tokens per row) ÷ rows × L,
  with the number of ancestor groups it would run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import torch

SPLITS = (1, 2, 4, 8, 16)
RULES = ((8, 8), (4, 4), (2, 2), (1, 1))  # SplitRule(private_min, align) of the kernel
ITEM_WIDTHS = (16, 64)  # rows per shared-suffix item
GEOMETRIC_PRIVATE = (1, 2, 4)


def item_reads(table: torch.Tensor, bounds: list[int], width: int) -> tuple[int, int]:
    """(slots read, items) when positions bounds[i] .. bounds[i+1] - 1 are read once per item
    of up to `width` rows sharing their slot at depth bounds[i+1] - 1 (one level per pair)."""
    reads = items = 0
    for start, end in itertools.pairwise(bounds):
        _, counts = torch.unique(table[:, end - 1], return_counts=True)
        level_items = int(((counts + width - 1) // width).sum())
        reads, items = reads + level_items * (end - start), items + level_items
    return reads, items


def geometric_bounds(shared: int) -> list[int]:
    """Levels over 0 .. shared - 1 whose spans halve towards the newest token (the last two or
    fewer tokens one level): deep levels have many small groups, so they are kept short."""
    bounds = [0]
    while bounds[-1] < shared:
        left = shared - bounds[-1]
        bounds.append(bounds[-1] + (max(left // 2, 2) if left > 2 else left))
    return bounds


def kernel_reads(table: torch.Tensor) -> dict[str, dict[str, float]]:
    """What a shared-suffix kernel reads ÷ rows × L, with items of ITEM_WIDTHS rows: one level
    split by each of RULES (as `suffix_tree.SplitRule` does), and geometric levels with a
    private tail of GEOMETRIC_PRIVATE tokens."""
    rows, length = table.shape
    total = rows * length
    out: dict[str, dict[str, float]] = {}
    for width in ITEM_WIDTHS:
        for private_min, align in RULES:
            shared = max(length - private_min, 0) // align * align
            reads, items = item_reads(table, [0, shared] if shared else [0], width)
            out[f"one level {private_min}:{align}, items of {width}"] = {
                "fraction": (reads + rows * (length - shared)) / total, "items": items
            }  # fmt: skip
        for private in GEOMETRIC_PRIVATE:
            shared = max(length - private, 0)
            bounds = geometric_bounds(shared)
            reads, items = item_reads(table, bounds, width)
            out[f"geometric, private {private}, items of {width}"] = {
                "fraction": (reads + rows * (length - shared)) / total,
                "items": items,
                "levels": len(bounds) - 1,
            }
    return out


def sharing(table: torch.Tensor) -> dict[str, object]:
    """table: [rows, L] int64 slots of one request's rows, oldest first."""
    rows, length = table.shape
    distinct = [int(torch.unique(table[:, j]).numel()) for j in range(length)]
    split: dict[str, dict[str, float]] = {}
    for r in SPLITS:
        if r >= length:
            continue
        groups = distinct[length - r - 1]
        reads = groups * (length - r) + rows * r
        split[str(r)] = {"fraction": reads / (rows * length), "groups": groups}
    return {
        "length": length,
        "rows": rows,
        "distinct_at_depth": distinct,
        "unique_read_fraction": sum(distinct) / (rows * length),
        "split_read_fraction": split,
        "kernel_reads": kernel_reads(table),
    }


def simulated_tables(rows: int, steps: int, seed: int = 0) -> Iterator[torch.Tensor]:
    """A beam search's suffix tables [rows, step] after each step, without a model: every row
    takes a parent drawn with weights u^8 (u uniform), so a few beams get most children (at
    5,000 rows and 64 steps about as much sharing as W1's random-weight model shows)."""
    gen = torch.Generator().manual_seed(seed)
    table = torch.empty((rows, 0), dtype=torch.int64)
    for step in range(steps):
        weights = torch.rand(rows, generator=gen) ** 8 + 1e-9
        parents = torch.multinomial(weights, rows, True, generator=gen)
        table = torch.cat([table[parents], torch.arange(rows)[:, None] + step * rows], dim=1)
        yield table


def main() -> None:
    # Here, not at the top: the tests load `sharing` without bench/ on the path.
    from harness import add_engine_args, engine_options, make_engine, model_dir

    import widebeam.services.decoder.engine as engine_module
    from widebeam.services.decoder.requests.spec import GenerationRequest
    from widebeam.services.decoder.runner.decode_inputs import decode_inputs
    from widebeam.services.decoder.runner.request_state import RequestState
    from widebeam.services.decoder.testing.tiny_model import write_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beams", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--at", default="4,8,16,32,64,128", help="suffix lengths to report")
    parser.add_argument("--shape", default="qwen3-0.6b")
    parser.add_argument("--smoke", action="store_true", help="CPU: a tiny model")
    parser.add_argument(
        "--simulated", action="store_true", help="no model: `simulated_tables`' beam search"
    )
    parser.add_argument("--out", help="the JSON report (default: $OUT/suffix_sharing.json)")
    add_engine_args(parser)
    args = parser.parse_args()
    wanted = {int(x) for x in args.at.split(",")}
    reports: list[dict[str, object]] = []
    if args.simulated:
        for table in simulated_tables(args.beams, args.tokens):
            if table.shape[1] in wanted:
                reports.append(sharing(table))
        return finish(args, reports)
    if args.smoke:
        import tempfile

        path = write_tiny_model(tempfile.mkdtemp(prefix="sharing-"), base_vocab=500, seed=0)
        args.beams, args.tokens = min(args.beams, 16), min(args.tokens, 6)
        wanted = {2, 4, 6}
    else:
        path = model_dir(args.shape)

    def recording(states: list[RequestState], device: torch.device):  # type: ignore[no-untyped-def]
        table = states[0].suffix_table
        if table is not None and table.shape[1] in wanted:
            reports.append(sharing(table.cpu()))
        return decode_inputs(states, device)

    engine = make_engine(
        path,
        max_rows=args.beams,
        max_kv_slots=64 + args.beams * (args.tokens + 1),
        **engine_options(args),
    )
    engine_module.decode_inputs = recording  # type: ignore[assignment]
    rng = random.Random(0)
    prompt = tuple(rng.randrange(10, 400 if args.smoke else 100000) for _ in range(64))
    request = GenerationRequest(
        "sharing", prompt, beam_width=args.beams, n=args.beams,
        max_new_tokens=args.tokens, ignore_eos=True,
    )  # fmt: skip
    engine.generate([request])
    finish(args, reports)


def finish(args: argparse.Namespace, reports: list[dict[str, object]]) -> None:
    for report in reports:
        split = "  ".join(
            f"r={r}: {s['fraction']:.3f} ({s['groups']} groups)"
            for r, s in report["split_read_fraction"].items()  # type: ignore[union-attr]
        )
        print(
            f"L={report['length']:4d} rows={report['rows']} unique "
            f"{report['unique_read_fraction']:.3f}  split {split}"
        )
        for name, read in report["kernel_reads"].items():  # type: ignore[union-attr]
            print(f"    {name}: reads {read['fraction']:.3f}, {read['items']} items")
    out = Path(args.out or Path(os.environ.get("OUT", "bench-out")) / "suffix_sharing.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"beams": args.beams, "tokens": args.tokens, "reports": reports}))


if __name__ == "__main__":
    main()
