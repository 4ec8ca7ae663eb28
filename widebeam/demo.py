"""`make demo` (until the full demo lands): build a tiny model and catalog locally, then run a
batch of beam, constrained and ordinary requests through the engine and print the beams."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from tokenizers import Tokenizer

from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.tiny import write_tiny_model
from widebeam.services.decoder.request import GenerationRequest, RequestOutput

CACHE = Path(".cache/demo-tiny")
SID_LEVELS = (32, 32, 32)


def build_artifacts(root: Path = CACHE) -> tuple[Path, Path]:
    model_dir, catalog = root / "model", root / "catalog.jsonl"
    if not (model_dir / "config.json").exists():
        write_tiny_model(
            model_dir,
            sid_levels=SID_LEVELS,
            base_vocab=256,
            hidden_size=128,
            intermediate_size=256,
            num_layers=4,
            seed=1,
        )
    if not catalog.exists():
        rng = random.Random(0)
        rows = {f"item-{i:04d}": [rng.randrange(c) for c in SID_LEVELS] for i in range(2000)}
        catalog.write_text(
            "".join(json.dumps({"item_id": k, "sid": v}) + "\n" for k, v in rows.items())
        )
    return model_dir, catalog


def _print(out: RequestOutput, req: GenerationRequest, tokenizer: Tokenizer) -> None:
    if req.constrained:
        kind = "SID-constrained beam"
    elif req.beam_width > 1:
        kind = "beam"
    else:
        kind = "sampled" if req.temperature else "greedy"
    print(
        f"\n{out.request_id}: {kind}, beam_width={req.beam_width}, n={req.n}, "
        f"prompt={list(req.input_ids)}"
    )
    for rank, beam in enumerate(out.beams):
        items = f"  items={beam.item_ids}" if beam.item_ids is not None else ""
        text = tokenizer.decode(beam.output_ids, skip_special_tokens=False)
        print(f"  #{rank}  score={beam.score:8.4f}  {beam.finish_reason:6s}  {text}{items}")


def main() -> None:
    model_dir, catalog = build_artifacts()
    engine = Engine(EngineConfig(model_dir=str(model_dir), catalog_path=str(catalog)))
    begin = engine.sid_layout.begin_token_id
    requests = [
        GenerationRequest(
            "rec-1", (3, 17, 42, begin), beam_width=64, n=5, max_new_tokens=5, constrained=True
        ),
        GenerationRequest("beam-1", (5, 6, 7), beam_width=8, n=3, max_new_tokens=6),
        GenerationRequest("greedy-1", (9, 10), max_new_tokens=6),
        GenerationRequest("sample-1", (9, 10), max_new_tokens=6, temperature=0.8, seed=7),
    ]
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    start = time.perf_counter()
    outputs = engine.generate(requests)
    elapsed = time.perf_counter() - start
    print(
        f"widebeam demo: model {model_dir}, catalog {catalog} (version {engine.constraint.version})"
    )
    for req, out in zip(requests, outputs, strict=True):
        _print(out, req, tokenizer)
    print(f"\n{len(requests)} requests batched together in {elapsed * 1000:.0f} ms on CPU")


if __name__ == "__main__":
    main()
