"""`make demo`: build (or reuse) the demo recommender, start the stack with `widebeam up`, and
show it working — a user's history with the recommended items, an OpenAI-style beam completion,
and a small batch job — then keep serving until Ctrl-C (or exit at once with DEMO_ONCE=1)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from widebeam.launcher.readiness import free_port

PY = [sys.executable, "-m", "widebeam"]
BUSY_RETRY_S = 120.0  # how long a demo call retries a 429 / 503 (a busy or warming-up stack)


def call(method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One request to the demo's stack. A 429 or 503 (overloaded, or not ready yet) is retried
    after its Retry-After (0.2-5 s) for up to BUSY_RETRY_S; any other error status stops the
    demo with the service's own message instead of a KeyError on an error body."""
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        reply = httpx.request(method, url, **kwargs)
        if reply.status_code < 400:
            return reply
        if reply.status_code in (429, 503) and time.monotonic() < deadline:
            time.sleep(_retry_after_s(reply))
            continue
        raise SystemExit(f"{method} {url}: HTTP {reply.status_code}: {_error_message(reply)}")


def _retry_after_s(reply: httpx.Response) -> float:
    try:
        seconds = float(reply.headers.get("Retry-After", "1"))
    except ValueError:  # an HTTP date: not worth parsing for a demo
        seconds = 1.0
    return min(max(seconds, 0.2), 5.0)


def _error_message(reply: httpx.Response) -> str:
    try:
        error = reply.json().get("error", {})
        return str(error.get("message") or reply.text[:500])
    except (ValueError, AttributeError):
        return reply.text[:500]


def build_artifacts(out: Path, tiny: bool) -> tuple[Path, Path]:
    """Run `widebeam demo build` (its progress shows) and read its `model:`/`catalog:` lines."""
    argv = [*PY, "demo", "build", "--out", str(out), *(["--tiny"] if tiny else [])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    found: dict[str, Path] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        for key in ("model", "catalog"):
            if line.startswith(f"{key}: "):
                found[key] = Path(line.split(": ", 1)[1].strip())
    if proc.wait() != 0 or len(found) != 2:
        raise SystemExit("widebeam demo build failed")
    return found["model"], found["catalog"]


def start_stack(model: Path, catalog: Path, port: int, log: Path) -> subprocess.Popen:
    # DEMO_UP_ARGS: more `widebeam up` flags (the suite's test moves every port and the state
    # directory off the defaults, which other things may hold).
    extra = shlex.split(os.environ.get("DEMO_UP_ARGS", ""))
    proc = subprocess.Popen(
        [*PY, "up", "--model", str(model), "--catalog", str(catalog), "--port", str(port), *extra],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 600
    while time.time() < deadline:
        if f"gateway: http://127.0.0.1:{port}" in log.read_text():
            return proc
        if proc.poll() is not None:
            raise SystemExit(f"widebeam up exited; its log:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("the stack did not become ready in 10 minutes")


def read_catalog(path: Path) -> dict[str, dict[str, Any]]:
    """item_id -> its catalog row (titles and categories for the printout)."""
    with path.open() as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return {row["item_id"]: row for row in rows}


def title(row: dict[str, Any] | None, item_id: str) -> str:
    if row is None:
        return item_id
    return str(row.get("title") or item_id)


def pick_user(out: Path, items: dict[str, dict[str, Any]]) -> tuple[str, list[str], str | None]:
    """A held-out user of the demo data when there is one (with the item they really picked
    next), else a few items of the largest category."""
    histories = out / "histories.jsonl"
    if histories.exists():
        with histories.open() as fh:
            user = json.loads(fh.readline())
        return user["user_id"], user["history"][-6:], user.get("held_out")
    by_category: dict[Any, list[str]] = {}
    for item_id, row in items.items():
        by_category.setdefault(row.get("category"), []).append(item_id)
    pool = max(by_category.values(), key=len)
    return "demo-user", random.Random(7).sample(pool, min(5, len(pool))), None


def show_recommendation(gateway: str, items: dict[str, dict[str, Any]], out: Path) -> list[str]:
    user_id, history, held_out = pick_user(out, items)
    body = {"user_id": user_id, "history": history, "n": 10, "beam_width": 32}
    reply = call("POST", f"{gateway}/v1/recommend", json=body, timeout=120).json()
    print("\n== POST /v1/recommend ==")
    print(f"{user_id}'s history (oldest first):")
    for item_id in history:
        print(f"    {item_id:<14} {title(items.get(item_id), item_id)}")
    version = reply["catalog"]["version"]
    print(
        f"recommended (catalog {reply['catalog']['name']!r} v{version}, "
        f"{reply['latency_ms']:.0f} ms):"
    )
    print(f"    {'#':>2}  {'item':<14} {'score':>8}  sid           title")
    for rank, item in enumerate(reply["items"], 1):
        sid = ",".join(map(str, item["sid"]))
        mark = "   <- what this user picked next" if item["item_id"] == held_out else ""
        print(
            f"    {rank:>2}  {item['item_id']:<14} {item['score']:8.3f}  {sid:<13} "
            f"{title(items.get(item['item_id']), item['item_id'])}{mark}"
        )
    if held_out is not None:
        print(
            f"    (held out: this user's real next item was {held_out}, "
            f"{title(items.get(held_out), held_out)})"
        )
    return history


def show_completion(gateway: str, history: list[str], items: dict[str, dict[str, Any]]) -> None:
    """An OpenAI-style completion with widebeam's beam fields, over plain HTTP (the OpenAI SDK
    sends the same body with `extra_body`; `make demo` installs runtime dependencies only)."""
    model = call("GET", f"{gateway}/v1/models", timeout=30).json()["data"][0]["id"]
    prompt = "".join(_sid_text(items[i]["sid"]) for i in history) + "<|sid_begin|>"
    body = {"model": model, "prompt": prompt, "max_tokens": 5, "n": 4, "beam_width": 4,
            "constrained": True}  # fmt: skip
    completion = call("POST", f"{gateway}/v1/completions", json=body, timeout=120).json()
    print("\n== POST /v1/completions (OpenAI-compatible, beam_width=4, constrained) ==")
    print(f"prompt: {prompt[:90]}{'…' if len(prompt) > 90 else ''}")
    for choice in completion["choices"]:
        print(
            f"    choice {choice['index']}: {choice['text']:<40} "
            f"score={choice.get('sequence_score', float('nan')):.3f} "
            f"items={choice.get('item_ids')}"
        )
    print(f"usage: {completion['usage']['total_tokens']} tokens")


def _sid_text(codes: list[int]) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return (
        "<|sid_begin|>"
        + "".join(f"<s_{letters[i]}_{c}>" for i, c in enumerate(codes))
        + "<|sid_end|>"
    )


def show_batch(gateway: str, items: dict[str, dict[str, Any]]) -> None:
    rng = random.Random(11)
    ids = list(items)
    rows = [
        {"user_id": f"user-{i}", "history": rng.sample(ids, 4), "n": 3, "beam_width": 8}
        for i in range(24)
    ]
    job = call("POST", f"{gateway}/v1/batch-jobs", json={"requests": rows}, timeout=60).json()
    print(f"\n== POST /v1/batch-jobs ({len(rows)} users) → job {job['id']} ==")
    tty, shown = sys.stdout.isatty(), ""
    while True:
        status = call("GET", f"{gateway}/v1/batch-jobs/{job['id']}", timeout=30).json()
        bar = "#" * int(30 * status["done"] / status["total"])
        line = f"    [{bar:<30}] {status['done']}/{status['total']} {status['status']}"
        if tty:  # redraw one line in a terminal; a log gets one line per change
            print(f"\r{line:<60}", end="", flush=True)
        elif line != shown:
            print(line, flush=True)
        shown = line
        if status["status"] not in ("queued", "running"):
            break
        time.sleep(0.5)
    if tty:
        print()
    # Users here have random histories: the batch shows the job machinery, not quality.
    lines = call("GET", f"{gateway}/v1/batch-jobs/{job['id']}/results", timeout=60).text
    for line in lines.splitlines()[:3]:
        row = json.loads(line)
        print(f"    {row.get('user_id')}: {[x['item_id'] for x in row.get('items', [])]}")
    print("    …")


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--tiny",
        action="store_true",
        default=bool(os.environ.get("DEMO_TINY")),
        help="the seconds-long toy recommender (DEMO_TINY=1; the suite's `make demo` test)",
    )
    parser.add_argument("--out", help="artifact directory (default .cache/demo, or demo-tiny)")
    parser.add_argument("--port", type=int, default=int(os.environ.get("DEMO_PORT", 8000)))
    parser.add_argument("--once", action="store_true", default=bool(os.environ.get("DEMO_ONCE")))
    parser.add_argument("--model", help="serve this model instead of building the demo one")
    parser.add_argument("--catalog", help="with --model: its catalog file")
    args = parser.parse_args()
    args.out = args.out or (".cache/demo-tiny" if args.tiny else ".cache/demo")
    if args.model and args.catalog:
        model, catalog = Path(args.model), Path(args.catalog)
    else:
        model, catalog = build_artifacts(Path(args.out), args.tiny)
    port = args.port if args.port else free_port()
    log = Path(args.out) / "stack.log"
    print(
        f"\nstarting the stack: widebeam up --model {model} --catalog {catalog} "
        f"--port {port}  (logs: {log})",
        flush=True,
    )
    stack = start_stack(model, catalog, port, log)
    gateway = f"http://127.0.0.1:{port}"
    try:
        items = read_catalog(catalog)
        history = show_recommendation(gateway, items, catalog.parent)
        show_completion(gateway, history, items)
        show_batch(gateway, items)
        print(f"\ngateway: {gateway}   API docs: {gateway}/docs   metrics: {gateway}/metrics")
        if args.once:
            return
        print("serving — Ctrl-C to stop", flush=True)
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            while stack.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("\nstopping", flush=True)
    finally:
        stack.send_signal(signal.SIGTERM)
        stack.wait(60)


if __name__ == "__main__":
    main()
