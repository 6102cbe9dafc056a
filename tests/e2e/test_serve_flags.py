"""The public ``sie-server serve`` flags that switch on diagnostics, on a real server: ``-i`` /
``--instrumentation`` (``SIE_INSTRUMENTATION``) and ``--tracing`` (``SIE_TRACING_ENABLED``). A flag
that parsed but never reached the settings would leave the log without its lines (the same server
without them logs neither: tests/server/test_server_variables.py)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import ENCODE, _free_port, run_server


def test_instrumentation_and_tracing_flags_reach_the_server(tmp_path: Path) -> None:
    # Spans go to a loopback port nothing listens on: the exporter drops them, the server serves.
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{_free_port()}"}
    with run_server(tmp_path, env, "-i", "--tracing") as server:
        answered = server.client.post(ENCODE, json={"items": [{"text": "hello"}, {"text": "world"}]})
        assert answered.status_code == 200, answered.text
        log = server.log_path.read_text()
    assert "tracing to http://127.0.0.1:" in log, log[-3000:]
    batch_lines = [line for line in log.splitlines() if "batch #" in line and "items=2" in line]
    assert batch_lines, log[-3000:]
