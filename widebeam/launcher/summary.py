"""The table `widebeam up` prints once the stack is ready: where every service answers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True)
class StackUrls:
    gateway: str  # http://HOST:PORT
    catalog: str  # http://127.0.0.1:PORT
    decoder: str  # HOST:PORT (gRPC)
    redis: str  # redis://[:password@]HOST:PORT/DB
    redis_note: str  # how the Redis was started / where its data lives


def redact(url: str) -> str:
    """`url` without its password (the table is printed to a terminal and to logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def persistence_note(state_dir: Path | None) -> str:
    if state_dir is None:
        return "no persistence (--no-persist): its data goes when the launcher stops"
    return f"append-only file in {state_dir / 'redis'} (kept across restarts)"


def summary_table(urls: StackUrls) -> str:
    rows = [
        ("gateway", urls.gateway, "REST API: /v1/recommend, /v1/completions, /v1/batch-jobs"),
        ("playground", f"{urls.gateway}/", "search items, see recommendations (a browser page)"),
        ("API docs", f"{urls.gateway}/docs", "Swagger UI; ReDoc at /redoc"),
        ("catalog service", urls.catalog, "widebeam catalog upload FILE --url ..."),
        ("metrics", f"{urls.gateway}/metrics", f"Prometheus; catalog's: {urls.catalog}/metrics"),
        ("decoder (gRPC)", urls.decoder, "bearer token of this run: gateway and worker only"),
        ("Redis", redact(urls.redis), urls.redis_note),
    ]
    width = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"  {'service':<{width[0]}}  {'URL':<{width[1]}}  notes"]
    lines += [f"  {name:<{width[0]}}  {url:<{width[1]}}  {note}" for name, url, note in rows]
    return "\n".join(lines)
