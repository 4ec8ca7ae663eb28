"""`served_redis(directory)`: the body of every fixture that runs a redis-server of its own
(`yield from served_redis(path)`), skipping the test where redis-server is not installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer, find_redis_server


def served_redis(directory: Path) -> Iterator[RedisServer]:
    """A redis-server working in `directory` until the fixture is torn down."""
    if find_redis_server() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server / make install)")
    with RedisServer(directory) as server:
        yield server
