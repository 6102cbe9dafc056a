"""The gateway's and sie-config's ``/openapi.json`` fuzzed by schemathesis (the CLI, as a user runs
it, with the msgpack hooks of the server's run) against real processes on a real ``nats-server``: no request, however malformed, draws a server
error (the server's own document is fuzzed with every check in tests/e2e/test_schemathesis.py).

The gateway has no worker here, so an admitted inference request is answered 202 provisioning (the
answer clients before sie-sdk 0.7 get) and everything before it (the body decode, the item cap, the
option checks, pools, the config proxy) meets the fuzzer. sie-config runs open (no tokens, not
production) with a store in a temporary folder, so its writes are reached. Seeds are fixed and
examples bounded: a few seconds of fuzzing each on two cores.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import NatsServer
from tests.e2e.cluster import run_config_service, run_gateway
from tests.e2e.test_schemathesis import run_schemathesis

SEED = 20261128
MAX_EXAMPLES = 15


def fuzz(url: str, folder: Path) -> str:
    return run_schemathesis(url, folder, "not_a_server_error", SEED, MAX_EXAMPLES)


def test_the_gateway_answers_every_fuzzed_request_without_a_server_error(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    env = {"SIE_NATS_URL": nats_server.url, "SIE_GATEWAY_REQUEST_TIMEOUT": "2"}
    with run_gateway(tmp_path / "gateway", env) as gateway:
        fuzz(gateway.url, tmp_path)
        assert gateway.metric("sie_gateway_requests_total") > 0
        assert gateway.client.get("/healthz").status_code == 200
        assert "Traceback" not in gateway.log(), gateway.log()


def test_sie_config_answers_every_fuzzed_request_without_a_server_error(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    env = {"SIE_NATS_URL": nats_server.url, "SIE_CONFIG_STORE_DIR": str(tmp_path / "store")}
    with run_config_service(tmp_path / "config", env) as service:
        fuzz(service.url, tmp_path)
        assert service.client.get("/healthz").status_code == 200
        assert "Traceback" not in service.log(), service.log()
