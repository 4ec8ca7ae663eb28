"""An items file for the item search and the playground: the test catalog's items (same ids
and SIDs as the decoder's catalog) with titles made of a colour and a noun, so title searches
have several matches and ids are searchable by prefix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

COLOURS = ("Amber", "Crimson", "Teal", "Violet", "Olive")
NOUNS = ("Lantern", "Harbour", "Meadow", "Compass")
ITEMS_KEY = "items-key-5d1e"


def title_of(index: int) -> str:
    return f"{COLOURS[index % len(COLOURS)]} {NOUNS[index % len(NOUNS)]} no. {index}"


def write_items_file(path: Path, sid_model: SidModel) -> dict[str, str]:
    """The catalog with a `title` column; returns item id -> title."""
    titles = {}
    with path.open("w") as fh:
        for index, (item_id, sid) in enumerate(sid_model.catalog):
            titles[item_id] = title_of(index)
            row = {"item_id": item_id, "sid": list(sid), "title": titles[item_id]}
            fh.write(json.dumps(row) + "\n")
    return titles


@pytest.fixture(scope="module")
def titles_and_gateway(
    tmp_path_factory: pytest.TempPathFactory, sid_model: SidModel, decoder_server: BackgroundServer
) -> Iterator[tuple[dict[str, str], GatewayServer]]:
    """A gateway with an API key and the items file in front of the test decoder."""
    path = tmp_path_factory.mktemp("items") / "items.jsonl"
    titles = write_items_file(path, sid_model)
    settings = gateway_settings(
        [decoder_server.address], api_keys=ITEMS_KEY, items_file=str(path), max_beam_width=48
    )
    with GatewayServer(settings) as gw:
        yield titles, gw
