"""What answering costs the gateway's host per request as n grows: FastAPI's default rendering
of a returned dict (its `jsonable_encoder` walk, and a `response_model`'s validation) against
`plain_json` (the dict dumped as it is), for a chat completion of n choices built by the
route's own code (`generation.Generated`) and a `/v1/recommend` answer of n items.

Each variant is a FastAPI route in one app, called over ASGI in process (the whole request
path, no network): the median of `--reps` calls, on one core.

    .venv/bin/python bench/gateway_json.py [--n 50,512,1000] [--reps 30]   # $OUT/*.json
    .venv/bin/python bench/gateway_json.py --smoke   # tests/bench/test_gateway_json_smoke.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from harness import environment, markdown_table, write_json  # noqa: E402

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb  # noqa: E402
from widebeam.services.gateway.generation import Generated  # noqa: E402
from widebeam.services.gateway.schemas.recommend import RecommendResponse  # noqa: E402
from widebeam.services.http.plain_json import plain_json  # noqa: E402


def chat_answer(n: int) -> dict[str, Any]:
    """A constrained chat completion of n beams (3 SID tokens + EOS each), as the route builds
    it (its text here is the SID tokens' text, which the route gets from the tokenizer)."""
    response = pb.GenerateResponse(catalog=pb.CatalogRef(name="default", version="v1"))
    for i in range(n):
        beam = response.beams.add(score=-1.25 - i / n, cum_logprob=-5.0 - i / n)
        beam.output_ids.extend([151_700 + i % 8192, 160_000 + i % 97, 168_000 + i % 13, 151_645])
        beam.item_ids.append(f"item-{i:08d}")
        beam.finish_reason = pb.FINISH_REASON_STOP
    generated = Generated(response, None, "model")
    text = "<s_a_1024><s_b_96><s_c_12>"
    choices = generated.choices(lambda beam: {"message": {"role": "assistant", "content": text}},
                                None)  # fmt: skip
    return generated.envelope("chat.completion", "chatcmpl", "model", choices)


def recommend_answer(n: int) -> dict[str, Any]:
    return {
        "items": [
            {"item_id": f"item-{i:08d}", "score": -1.25 - i / n, "sid": [i % 8192, i % 97, i % 13]}
            for i in range(n)
        ],
        "catalog": {"name": "default", "version": "v1"},
        "model": "model",
        "usage": {"prompt_tokens": 241, "completion_tokens": 3 * n, "total_tokens": 241 + 3 * n},
        "latency_ms": 12.5,
        "beam_width": n,
        "exhausted": False,
        "skipped_history_item_ids": [],
    }


def make_app() -> FastAPI:
    app = FastAPI()

    @app.post("/chat/dict", response_model=None)
    async def chat_dict(n: int) -> dict[str, Any]:
        return chat_answer(n)

    @app.post("/chat/plain", response_model=None)
    async def chat_plain(n: int) -> Any:
        return plain_json(chat_answer(n))

    @app.post("/recommend/dict", response_model=RecommendResponse)
    async def recommend_dict(n: int) -> dict[str, Any]:
        return recommend_answer(n)

    @app.post("/recommend/plain", response_model=RecommendResponse)
    async def recommend_plain(n: int) -> Any:
        return plain_json(recommend_answer(n))

    return app


async def median_ms(client: httpx.AsyncClient, path: str, n: int, reps: int) -> float:
    times = []
    for _ in range(reps + 2):  # two warm-up calls
        start = time.perf_counter()
        response = await client.post(path, params={"n": n})
        times.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return statistics.median(times[2:])


async def measure(widths: list[int], reps: int) -> list[dict[str, Any]]:
    transport = httpx.ASGITransport(app=make_app())
    rows = []
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for answer in ("chat", "recommend"):
            for n in widths:
                plain = await client.post(f"/{answer}/plain", params={"n": n})
                default = await client.post(f"/{answer}/dict", params={"n": n})
                same = [{k: v for k, v in r.json().items() if k not in ("id", "created")}
                        for r in (plain, default)]  # fmt: skip
                assert same[0] == same[1], f"the two renderings of {answer} differ"
                dict_ms = await median_ms(client, f"/{answer}/dict", n, reps)
                plain_ms = await median_ms(client, f"/{answer}/plain", n, reps)
                rows.append({"answer": answer, "n": n, "bytes": len(plain.content),
                             "fastapi_ms": dict_ms, "plain_json_ms": plain_ms})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="50,512,1000", help="comma list of choice / item counts")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="two small n, few calls")
    args = parser.parse_args()
    widths = [int(w) for w in args.n.split(",")]
    if args.smoke:
        widths, args.reps = [4, 64], 3
    rows = asyncio.run(measure(widths, args.reps))
    env = environment()
    write_json("gateway_json", {"env": env, "reps": args.reps, "rows": rows})
    print(f"Gateway answer rendering, median of {args.reps} calls over ASGI, {env}")
    table = [
        [r["answer"], r["n"], r["bytes"], r["fastapi_ms"], r["plain_json_ms"],
         f"{r['fastapi_ms'] / r['plain_json_ms']:.1f}x"]
        for r in rows
    ]  # fmt: skip
    print(markdown_table(["answer", "n", "bytes", "FastAPI's ms", "plain_json ms", "ratio"], table))


if __name__ == "__main__":
    main()
