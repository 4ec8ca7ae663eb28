"""The real catalog app served by uvicorn in a thread on a free port, over the test Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

from tests.services.catalog.formats import catalog_writers as cw
from widebeam.services.catalog.service import CatalogSettings, create_app
from widebeam.services.catalog.service.server import bind

LAYOUT_SPEC = cw.LAYOUT.to_spec()


@dataclass
class Service:
    url: str
    http: httpx.Client
    settings: CatalogSettings

    def upload(
        self,
        name: str,
        data: bytes,
        key: str | None = None,
        multipart: bool = False,
        **options: Any,
    ) -> httpx.Response:
        """POST a catalog (raw body + query options, or multipart + form fields)."""
        options = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        path = f"/v1/catalogs/{name}/versions"
        if multipart:
            files = {"file": ("catalog.bin", data, "application/octet-stream")}
            return self.http.post(path, files=files, data=options, headers=headers)
        headers["Content-Type"] = "application/octet-stream"
        return self.http.post(path, content=data, params=options, headers=headers)

    def current(self, name: str) -> int | None:
        response = self.http.get(f"/v1/catalogs/{name}")
        return None if response.status_code == 404 else response.json()["current_version"]


StartService = Callable[..., Service]


@pytest.fixture
def start_service(redis_url: str) -> Iterator[StartService]:
    """Factory: ``start_service(api_key=..., max_upload_bytes=...)`` -> a running Service."""
    servers: list[tuple[uvicorn.Server, threading.Thread, httpx.Client]] = []

    def start(**overrides: Any) -> Service:
        settings = CatalogSettings(redis_url=redis_url, port=0, **overrides)
        sock = bind("127.0.0.1", 0)
        port = sock.getsockname()[1]
        # log_config=None: uvicorn's records propagate to the root logger (caplog sees them).
        config = uvicorn.Config(create_app(settings), log_config=None, log_level="info")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port}"
        http = httpx.Client(base_url=url, timeout=30)
        servers.append((server, thread, http))
        return Service(url, http, settings)

    yield start
    for server, thread, http in servers:
        http.close()
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def service(start_service: StartService) -> Service:
    """No API key, the test layout as the service default."""
    return start_service(sid_layout=LAYOUT_SPEC)
