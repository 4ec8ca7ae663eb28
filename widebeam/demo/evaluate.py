"""Held-out next-item quality: the trained model through the widebeam engine vs popularity.

Each evaluated user's prompt is ``history_prompt`` of their last ``max_items - 1`` training items
(what the Recommend RPC would send); the answer is their held-out item. Beam requests are the
Recommend RPC's: ``max_new_tokens`` = codes + end, no EOS. A method's ranked list is its items
in beam order (a constrained beam names every item of its SID; an unconstrained beam whose
tokens are not a catalog SID names none and counts as illegal).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from widebeam.demo.config import EvalConfig
from widebeam.demo.progress import progress_bar
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.prompting import sid_to_tokens


@dataclass(frozen=True)
class MethodScore:
    method: str
    recall: float
    ndcg: float
    illegal_rate: float | None = None  # share of returned beams that name no catalog item


@dataclass(frozen=True)
class EvalReport:
    k: int
    beam_width: int
    users: int
    seconds: float
    rows: tuple[MethodScore, ...]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def table(self) -> str:
        k = self.k
        head = f"{'method':<34}{f'Recall@{k}':>10}{f'NDCG@{k}':>10}{'illegal SIDs':>14}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            illegal = "-" if r.illegal_rate is None else f"{100 * r.illegal_rate:.1f}%"
            lines.append(f"{r.method:<34}{r.recall:>10.4f}{r.ndcg:>10.4f}{illegal:>14}")
        lines.append(f"({self.users} held-out users, beam width {self.beam_width})")
        return "\n".join(lines)


def rank_metrics(
    ranked: Sequence[Sequence[str]], targets: Sequence[str], k: int
) -> tuple[float, float]:
    """(Recall@k, NDCG@k) with one relevant item per user (recall = hit rate)."""
    hits, gain = 0, 0.0
    for items, target in zip(ranked, targets, strict=True):
        top = list(items)[:k]
        if target in top:
            hits += 1
            gain += 1.0 / math.log2(top.index(target) + 2)
    n = max(len(targets), 1)
    return hits / n, gain / n


def evaluate(
    model_dir: str,
    catalog_path: str,
    layout: SidLayout,
    sid_items: dict[tuple[int, ...], list[str]],  # SID -> its items, the engine's order
    prompts: Sequence[list[int]],  # per user: history prompt tokens (ends with `begin`)
    targets: Sequence[str],  # per user: the held-out item id
    popular: Sequence[str],  # item ids, most popular (in training data) first
    cfg: EvalConfig,
    progress: bool = False,
) -> EvalReport:
    """Both beam methods' requests go to the engine as one continuous batch (a progress bar
    over finished requests on stderr with ``progress``)."""
    start = time.perf_counter()
    engine = Engine(
        EngineConfig(model_dir=model_dir, catalog_path=catalog_path, max_rows=cfg.max_rows)
    )
    # Generated tokens of a legal path: the SID's prompt tokens minus the leading `begin`.
    skip = 0 if layout.begin_token_id is None else 1
    path_items = {
        tuple(sid_to_tokens(layout, sid)[skip:]): items for sid, items in sid_items.items()
    }
    steps = layout.path_length(include_begin=False)
    modes = (True, False)  # constrained, unconstrained
    requests = [_request(prompt, i, cfg, steps, constrained)
                for constrained in modes for i, prompt in enumerate(prompts)]  # fmt: skip
    outs = _run(engine, requests, progress)
    rows = []
    for m, constrained in enumerate(modes):
        ranked, illegal, returned = [], 0, 0
        for out in outs[m * len(prompts) : (m + 1) * len(prompts)]:
            items: list[str] = []
            for beam in out.beams:
                named = beam.item_ids if constrained else path_items.get(tuple(beam.output_ids))
                illegal += not named
                items += [i for i in named or () if i not in items]
            returned += len(out.beams)
            ranked.append(items)
        recall, ndcg = rank_metrics(ranked, targets, cfg.k)
        name = "constrained beam (catalog trie)" if constrained else "unconstrained beam"
        rows.append(MethodScore(name, recall, ndcg, illegal / max(returned, 1)))
    recall, ndcg = rank_metrics([popular] * len(targets), targets, cfg.k)
    rows.append(MethodScore("popularity (top items in training)", recall, ndcg))
    return EvalReport(cfg.k, cfg.beam_width, len(targets), time.perf_counter() - start, tuple(rows))


def _request(
    prompt: list[int], user: int, cfg: EvalConfig, steps: int, constrained: bool
) -> GenerationRequest:
    return GenerationRequest(
        f"{'constrained' if constrained else 'unconstrained'}-user-{user}",
        tuple(prompt),
        beam_width=cfg.beam_width,
        n=cfg.k,
        max_new_tokens=steps,
        eos_token_id=(),  # as the Recommend RPC: a full SID path ends the beam
        constrained=constrained,
    )


def _run(
    engine: Engine, requests: Sequence[GenerationRequest], progress: bool
) -> list[RequestOutput]:
    """`Engine.generate`'s loop, with a progress bar; outputs in request order."""
    for request in requests:
        engine.submit(request)  # a refused request is a demo bug: let its RequestError out
    done: dict[str, RequestOutput] = {}
    bar = progress_bar("evaluating", "req", progress, len(requests))
    while engine.has_unfinished():
        for out in engine.step():
            done[out.request_id] = out
            bar.update(1)
    bar.close()
    failed = [o.error for o in done.values() if o.error]
    if failed:
        raise RuntimeError(f"{len(failed)} evaluation request(s) failed, e.g.: {failed[0]}")
    return [done[r.request_id] for r in requests]
