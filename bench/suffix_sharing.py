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
import json
import os
import random
from pathlib import Path

import torch

SPLITS = (1, 2, 4, 8, 16)


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
    }


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
    parser.add_argument("--out", help="the JSON report (default: $OUT/suffix_sharing.json)")
    add_engine_args(parser)
    args = parser.parse_args()
    if args.smoke:
        import tempfile

        path = write_tiny_model(tempfile.mkdtemp(prefix="sharing-"), base_vocab=500, seed=0)
        args.beams, args.tokens, args.at = min(args.beams, 16), min(args.tokens, 6), "2,4,6"
    else:
        path = model_dir(args.shape)
    wanted = {int(x) for x in args.at.split(",")}
    reports: list[dict[str, object]] = []

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
    for report in reports:
        split = "  ".join(
            f"r={r}: {s['fraction']:.3f} ({s['groups']} groups)"
            for r, s in report["split_read_fraction"].items()  # type: ignore[union-attr]
        )
        print(
            f"L={report['length']:4d} rows={report['rows']} unique "
            f"{report['unique_read_fraction']:.3f}  split {split}"
        )
    out = Path(args.out or Path(os.environ.get("OUT", "bench-out")) / "suffix_sharing.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"beams": args.beams, "tokens": args.tokens, "reports": reports}))


if __name__ == "__main__":
    main()
