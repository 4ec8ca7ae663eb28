"""`python -m widebeam.demo` (what `make demo` runs for now): build or reuse the demo artifacts,
then recommend for a few held-out users in-process and print their histories and the beams."""

from __future__ import annotations

import json
import time
from pathlib import Path

from widebeam.demo.build import DemoArtifacts, build_demo
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.prompting import history_prompt

USERS = 3
SHOWN_HISTORY = 5


def _load(art: DemoArtifacts) -> tuple[dict[str, dict], list[dict]]:
    lines = art.catalog.read_text().splitlines()
    catalog = {row["item_id"]: row for row in map(json.loads, lines)}
    histories = [json.loads(line) for line in art.histories.read_text().splitlines()[:USERS]]
    return catalog, histories


def main() -> None:
    art = build_demo()
    print(art.eval_table())
    print(f"model: {art.model_dir}")
    print(f"catalog: {art.catalog}")
    catalog, users = _load(art)
    layout = SidLayout.from_tokenizer(art.model_dir)
    assert layout is not None
    engine = Engine(EngineConfig(model_dir=str(art.model_dir), catalog_path=str(art.catalog)))
    requests = [
        GenerationRequest(
            user["user_id"],
            tuple(history_prompt(layout, [catalog[i]["sid"] for i in user["history"]])),
            beam_width=32,
            n=5,
            max_new_tokens=layout.path_length(include_begin=False),
            eos_token_id=(),
            constrained=True,
        )
        for user in users
    ]
    start = time.perf_counter()
    outputs = engine.generate(requests)
    elapsed = time.perf_counter() - start
    for user, out in zip(users, outputs, strict=True):
        print(f"\n{user['user_id']}: last {SHOWN_HISTORY} of {len(user['history'])} items")
        for item in user["history"][-SHOWN_HISTORY:]:
            print(f"    {item}  {catalog[item]['title']}")
        print(f"  held out (the real next item): {catalog[user['held_out']]['title']}")
        for rank, beam in enumerate(out.beams):
            for item in beam.item_ids or ():
                hit = "  <- held-out item" if item == user["held_out"] else ""
                print(f"  #{rank + 1}  {beam.score:7.3f}  {item}  {catalog[item]['title']}{hit}")
    print(f"\n{len(requests)} constrained beam requests (width 32) batched in "
          f"{elapsed * 1000:.0f} ms on CPU; artifacts in {Path(art.root)}")  # fmt: skip


if __name__ == "__main__":
    main()
