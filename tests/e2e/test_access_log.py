"""uvicorn's access log: off unless asked for, since at high request rates it cost up to a third of the loop."""

from __future__ import annotations

import re

from tests.e2e.conftest import Server, run_server

ACCESS_LINE = re.compile(r'"POST /v1/encode/\S+ HTTP/1\.1" 200')


def test_requests_are_not_logged_by_default(server: Server) -> None:
    server.encode(["not logged"])
    assert not ACCESS_LINE.search(server.log())
    assert "uvicorn.access" not in server.log()


def test_access_log_flag_logs_every_request(tmp_path) -> None:
    with run_server(tmp_path, {}, "--access-log") as logged:
        for text in ("first", "second"):
            logged.encode([text])
        assert len(ACCESS_LINE.findall(logged.log())) == 2
