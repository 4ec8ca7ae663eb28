"""The playground's files over real HTTP: `/` is the page, its script and style sheet are served
from `/playground/`, nothing is loaded from outside, and serving them needs no API key (the
page's API calls do). The browser test (`test_playground_browser.py`) drives the page itself."""

from __future__ import annotations

import re

import httpx

from tests.services.gateway.items_support import titles_and_gateway  # noqa: F401 (fixture)
from tests.services.gateway.support import GatewayServer
from tests.services.gateway.test_api_docs import loaded_urls

Gateway = tuple[dict[str, str], GatewayServer]


def test_page_and_its_files(titles_and_gateway: Gateway) -> None:  # noqa: F811
    with httpx.Client(base_url=titles_and_gateway[1].url, timeout=30) as http:  # no API key
        page = http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        urls = loaded_urls(page.text)
        local = [u for u in urls if u.startswith("/playground/")]
        assert {u.rsplit(".", 1)[1] for u in local} == {"js", "css"}, urls
        bodies = [page.text]
        scripts = []
        for url in local:
            response = http.get(url)
            assert response.status_code == 200, url
            kind = "javascript" if url.endswith(".js") else "text/css"
            assert kind in response.headers["content-type"], url
            bodies.append(response.text)
            if url.endswith(".js"):
                scripts.append(response.text)
        for url in urls:  # the other links are the gateway's own pages
            assert url.startswith("/") and not url.startswith("//"), url
        for body in bodies:
            assert not re.search(r"https?://", body), "the playground loads nothing from outside"
        # the key typed into the page is kept in localStorage and sent as a Bearer header
        assert any("localStorage" in s and '"Bearer "' in s for s in scripts)
        assert http.get("/playground/README.md").status_code == 404
        assert http.get("/playground/nope.js").status_code == 404
