"""`widebeam up`'s gateway options end to end: the ready table names the playground (the
gateway's `/`), `--catalog` is the items file `/v1/items` searches by title, and
`--served-model-name` / `--default-constrained` reach the gateway, so a completion for the alias
that never says `constrained` walks the catalog trie. Their parsing without a stack, too."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import start_stack, stop_stack, summary_urls
from widebeam.cli import build_parser
from widebeam.launcher.gateway_options import GatewayOptions

ALIAS = "flashrec"


def _options(*argv: str) -> GatewayOptions:
    return GatewayOptions.from_args(build_parser().parse_args(["up", "--model", "m", *argv]))


def test_items_file_follows_the_catalog_unless_given() -> None:
    assert _options().gateway_flags() == []
    assert _options("--catalog", "c.jsonl").gateway_flags() == ["--items-file", "c.jsonl"]
    given = _options("--catalog", "c.jsonl", "--items-file", "titles.csv")
    assert given.gateway_flags() == ["--items-file", "titles.csv"]


def test_model_names_pass_through_as_the_gateway_takes_them() -> None:
    named = _options("--served-model-name", "a", "b", "--served-model-name", "c",
                     "--default-constrained", "a", "c")  # fmt: skip
    assert named.gateway_flags() == [
        "--served-model-name", "a", "b", "c", "--default-constrained", "a", "c",
    ]  # fmt: skip
    # The bare flag is every served name, as on `widebeam gateway serve`.
    assert _options("--default-constrained").gateway_flags() == ["--default-constrained"]


def _titled_catalog(sid_model: SidModel, path: Path) -> dict[str, str]:
    """The model's catalog with a title per item; returns item id -> title."""
    titles = {}
    with path.open("w") as out:
        for line in sid_model.catalog_path.read_text().splitlines():
            row = json.loads(line)
            titles[row["item_id"]] = f"Lantern volume {row['item_id'].split('-')[1]}"
            out.write(json.dumps(row | {"title": titles[row["item_id"]]}) + "\n")
    return titles


@pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")
def test_up_serves_playground_items_and_default_constrained_alias(
    sid_model: SidModel, tmp_path: Path
) -> None:
    catalog = tmp_path / "titled.jsonl"
    titles = _titled_catalog(sid_model, catalog)
    port = free_port()
    proc, log = start_stack(
        sid_model.model_dir, catalog, port, tmp_path,
        "--served-model-name", ALIAS, "--default-constrained", ALIAS,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        playground = summary_urls(log)["playground"]
        assert playground == f"{base}/"
        page = httpx.get(playground, timeout=60)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        found = httpx.get(f"{base}/v1/items", params={"q": "volume 123"}, timeout=60)
        assert found.status_code == 200, found.text
        assert [(i["item_id"], i["title"]) for i in found.json()["items"]] == [
            ("item-123", titles["item-123"])
        ]
        body = {"prompt": [1, 2, 3], "n": 2, "max_tokens": 5}
        aliased = httpx.post(f"{base}/v1/completions", json=body | {"model": ALIAS}, timeout=120)
        assert aliased.status_code == 200, aliased.text
        assert aliased.json()["catalog"]["name"] == "default"
        assert all(choice["item_ids"] for choice in aliased.json()["choices"])
        # The model's own name is not among --default-constrained: unconstrained.
        own = httpx.post(f"{base}/v1/completions", json=body | {"model": "model"}, timeout=120)
        assert own.status_code == 200, own.text
        assert "catalog" not in own.json()
    finally:
        code = stop_stack(proc)
    assert code == 0, log.read_text()[-3000:]
