"""Client side of ``widebeam catalog upload``: stream a file to the service with a progress bar.

The body is the raw file (options as query parameters), sent from a generator so a large
catalog is never read into memory; ``Content-Length`` is declared so the service can refuse
an oversized upload before it is sent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from widebeam.services.catalog.sid_layout import SidLayout

_CHUNK = 1 << 20
_CONTENT_TYPES = {
    ".jsonl": "application/x-ndjson",
    ".ndjson": "application/x-ndjson",
    ".csv": "text/csv",
    ".json": "application/json",
    ".parquet": "application/vnd.apache.parquet",
    ".gz": "application/gzip",
}


def _chunks(path: Path, bar: tqdm) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            bar.update(len(chunk))
            yield chunk


def _params(args: argparse.Namespace) -> dict[str, str]:
    params: dict[str, str] = {}
    if args.format:
        params["format"] = args.format
    if args.sid_layout:
        params["sid_layout"] = args.sid_layout
    elif args.model:
        layout = SidLayout.from_tokenizer(args.model)
        if layout is None:
            raise ValueError(f"model {args.model!r}: its tokenizer has no <s_a_N> SID tokens")
        params["sid_layout"] = layout.to_spec()
    if args.codebook_size is not None:
        params["codebook_size"] = str(args.codebook_size)
    if args.metadata is not None:
        params["metadata"] = args.metadata
    if args.no_activate:
        params["activate"] = "false"
    return params


def upload(
    path: Path,
    url: str,
    name: str,
    params: dict[str, str],
    api_key: str | None,
    timeout: float,
    progress: bool,
) -> httpx.Response:
    size = path.stat().st_size
    headers = {
        "Content-Type": _CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"),
        "Content-Length": str(size),
        # Recorded in the manifest's metadata.source.filename (quotes would end the value).
        "Content-Disposition": f'attachment; filename="{path.name.replace(chr(34), "")}"',
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    endpoint = f"{url.rstrip('/')}/v1/catalogs/{name}/versions"
    with tqdm(
        total=size, unit="B", unit_scale=True, desc=path.name, disable=not progress, file=sys.stderr
    ) as bar:
        return httpx.post(
            endpoint,
            params=params,
            headers=headers,
            content=_chunks(path, bar),
            timeout=httpx.Timeout(timeout, connect=10.0),
        )


def _error_message(response: httpx.Response) -> str:
    try:
        error: dict[str, Any] = response.json()["error"]
        return f"{response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code} {response.reason_phrase}: {response.text[:500]}"


def upload_from_args(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {args.file}")
    api_key = args.api_key or os.environ.get("WIDEBEAM_CATALOG_API_KEY") or None
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        response = upload(path, args.url, args.name, _params(args), api_key, args.timeout, progress)
    except httpx.WriteError as exc:
        # The service may refuse (413) and close before the whole body is sent.
        print(
            f"widebeam catalog upload: error: the service closed the connection during the "
            f"upload ({exc}); the file may exceed its upload limit",
            file=sys.stderr,
        )
        return 1
    except httpx.HTTPError as exc:
        print(f"widebeam catalog upload: error: {args.url}: {exc}", file=sys.stderr)
        return 1
    if response.status_code != 201:
        print(f"widebeam catalog upload: error: {_error_message(response)}", file=sys.stderr)
        return 1
    print(json.dumps(response.json(), indent=2))
    return 0
