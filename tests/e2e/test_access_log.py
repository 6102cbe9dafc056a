"""uvicorn's access log: off unless asked for, since at high request rates it cost up to a third of the
loop. ``--access-log`` turning it on is tests/e2e/test_serve_flags.py's (one server with every
diagnostics flag)."""

from __future__ import annotations

import re

from tests.e2e.conftest import Server

ACCESS_LINE = re.compile(r'"POST /v1/encode/\S+ HTTP/1\.1" 200')


def test_requests_are_not_logged_by_default(server: Server) -> None:
    server.encode(["not logged"])
    assert not ACCESS_LINE.search(server.log())
    assert "uvicorn.access" not in server.log()
