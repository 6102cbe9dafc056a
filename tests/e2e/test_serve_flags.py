"""The public ``sie-server serve`` flags that switch on diagnostics, on one real server started with
all of them: ``-i`` / ``--instrumentation`` (``SIE_INSTRUMENTATION``), ``--tracing``
(``SIE_TRACING_ENABLED``) and ``--access-log``. A flag that parsed but never reached the settings
would leave the log without its lines (the same server without them logs neither:
tests/server/test_server_variables.py, and tests/e2e/test_access_log.py for the access log)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import ENCODE, Server, run_server
from tests.e2e.test_access_log import ACCESS_LINE
from tests.e2e.test_tracing import Receiver, otlp_receiver


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Receiver]]:
    """The server and the OTLP receiver its spans go to (with none listening, the exporter's retries
    held its shutdown for 10 s)."""
    with otlp_receiver() as (receiver, endpoint):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        folder = tmp_path_factory.mktemp("flagged")
        with run_server(folder, env, "-i", "--tracing", "--access-log") as server:
            yield server, receiver


def test_instrumentation_and_tracing_flags_reach_the_server(flagged: tuple[Server, Receiver]) -> None:
    server, receiver = flagged
    answered = server.client.post(ENCODE, json={"items": [{"text": "hello"}, {"text": "world"}]})
    assert answered.status_code == 200, answered.text
    log = server.log()
    assert "tracing to http://127.0.0.1:" in log, log[-3000:]
    batch_lines = [line for line in log.splitlines() if "batch #" in line and "items=2" in line]
    assert batch_lines, log[-3000:]
    deadline = time.monotonic() + 30
    while not any(span["attributes"].get("batch_size") == 2 for span in receiver.named("encode")):
        assert time.monotonic() < deadline, f"no span of the 2-item batch: {receiver.spans}"
        time.sleep(0.1)


def test_access_log_flag_logs_every_request(flagged: tuple[Server, Receiver]) -> None:
    server, _ = flagged
    before = len(ACCESS_LINE.findall(server.log()))
    for text in ("first", "second"):
        server.encode([text])
    assert len(ACCESS_LINE.findall(server.log())) == before + 2
