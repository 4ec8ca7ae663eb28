"""/docs (Swagger UI) and /redoc over real HTTP: every URL the pages load is the gateway's own,
each asset is served, nothing comes from outside, and no API key is needed."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import httpx
import pytest

from tests.services.gateway.items_support import titles_and_gateway  # noqa: F401 (fixture)
from tests.services.gateway.support import GatewayServer

Gateway = tuple[dict[str, str], GatewayServer]
EXPECTED_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


class _Urls(HTMLParser):
    """The URLs an HTML page loads: src / href / spec-url attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href", "spec-url") and v]


def loaded_urls(html: str) -> list[str]:
    parser = _Urls()
    parser.feed(html)
    # Swagger UI's initialiser names the schema in its script: `url: '/openapi.json'`.
    return parser.urls + re.findall(r"\burl:\s*'([^']*)'", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_load_only_local_urls(titles_and_gateway: Gateway, page: str) -> None:  # noqa: F811
    with httpx.Client(base_url=titles_and_gateway[1].url, timeout=30) as http:  # no API key
        response = http.get(page)
        assert response.status_code == 200
        html = response.text
        assert "http://" not in html and "https://" not in html, html
        urls = loaded_urls(html)
        assert "/openapi.json" in urls
        assets = [u for u in urls if u != "/openapi.json"]
        assert any(u.endswith(".js") for u in assets), urls
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), url
        for url in assets:
            asset = http.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 1000, url
            suffix = url[url.rfind(".") :]
            assert EXPECTED_TYPES[suffix] in asset.headers["content-type"], url
        assert http.get("/openapi.json").json()["paths"]["/v1/items"]


def test_unknown_asset_is_404(titles_and_gateway: Gateway) -> None:  # noqa: F811
    url = titles_and_gateway[1].url
    for name in ("nope.js", "..%2Fcore.py"):
        response = httpx.get(f"{url}/docs/assets/{name}", timeout=30)
        assert response.status_code == 404, name
