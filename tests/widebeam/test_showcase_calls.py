"""`make demo`'s calls to the stack (`widebeam/showcase.py`), against a real HTTP server that
answers a scripted sequence: a busy stack (429 / 503 with Retry-After) is waited out, any other
error stops the demo with the service's own message, not a KeyError on the error body."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from widebeam.showcase import call

Reply = tuple[int, dict[str, str], dict]


class Scripted(ThreadingHTTPServer):
    replies: list[Reply]
    served: int = 0


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def _answer(self) -> None:
        replies = self.server.replies
        status, headers, body = replies[min(self.server.served, len(replies) - 1)]
        self.server.served += 1
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *_: object) -> None:  # no access log on the test's output
        pass


@pytest.fixture
def server() -> Iterator[Scripted]:
    srv = Scripted(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: Scripted) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/v1/recommend"


def test_a_busy_stack_is_waited_out(server: Scripted) -> None:
    busy = {"error": {"message": "overloaded"}}
    server.replies = [(429, {"Retry-After": "0"}, busy), (503, {"Retry-After": "soon"}, busy),
                      (200, {}, {"items": [1]})]  # fmt: skip
    reply = call("POST", _url(server), json={}, timeout=10)
    assert reply.status_code == 200 and reply.json() == {"items": [1]}
    assert server.served == 3


def test_another_error_stops_the_demo_with_its_message(server: Scripted) -> None:
    server.replies = [(400, {}, {"error": {"message": "n must be <= 512"}})]
    with pytest.raises(SystemExit, match=r"POST .*/v1/recommend: HTTP 400: n must be <= 512"):
        call("POST", _url(server), json={}, timeout=10)
    assert server.served == 1  # not retried
