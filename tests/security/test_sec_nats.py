"""NATS secured end to end (audit H4, M7): a user per role with the permissions of
``sie.queue.roles``, on a real ``nats-server`` started from that table. A pod without credentials
cannot connect; a gateway's or a worker's credentials cannot forge a heartbeat, a config delta or
work they have no business publishing; a real gateway on the secured server still routes to a real
heartbeat; passwords never reach a log line."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client

from sie.gateway.app import create_app
from sie.queue.access import NatsAccess, redacted
from sie.queue.connection import connect
from sie.queue.contract import CONFIG_ALL_SUBJECT, Heartbeat, config_subject, encode_heartbeat, health_subject
from sie.queue.roles import ROLES, server_config
from sie.settings.gateway import GatewaySettings
from tests.conftest import NatsServer, _free_nats_port, nats_binary, running_nats

PASSWORDS = {role: f"{role}-secret-{index}" for index, role in enumerate(ROLES)}

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    with running_nats(tmp_path_factory.mktemp("nats-secured"), PASSWORDS) as server:
        yield server


def access(server: NatsServer, role: str) -> NatsAccess:
    return NatsAccess([server.url], f"sie-{role}", PASSWORDS[role])


class Violations:
    """The asynchronous errors a client was told: a permission violation arrives here, not as a raise."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def record(self, error: Exception) -> None:
        self.seen.append(str(error))


async def as_role(server: NatsServer, role: str, violations: Violations) -> Client:
    return await nats.connect(
        server.url, user=f"sie-{role}", password=PASSWORDS[role], error_cb=violations.record
    )


async def test_a_client_without_credentials_is_refused(secured: NatsServer) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured.url, allow_reconnect=False, connect_timeout=5)
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(secured.url, user="sie-gateway", password="guess", allow_reconnect=False)


@pytest.mark.parametrize(
    "role,subject",
    [
        ("gateway", health_subject("w-real")),  # a forged heartbeat (terminated: true removes a worker)
        ("gateway", CONFIG_ALL_SUBJECT),  # a forged config delta
        ("worker", config_subject("default")),
        ("worker", "sie.work.default.default.default.model"),  # work only gateways publish
        ("config", health_subject("w-real")),
        ("config", "sie.work.default.default.default.model"),
    ],
)
async def test_a_role_cannot_publish_what_is_not_its_own(
    secured: NatsServer, role: str, subject: str
) -> None:
    violations = Violations()
    client = await as_role(secured, role, violations)
    try:
        await client.publish(subject, b'{"forged": true}')
        await client.flush()
        deadline = time.monotonic() + 5
        while not violations.seen:
            assert time.monotonic() < deadline, "the server accepted the publish"
            await asyncio.sleep(0.02)
        assert "permissions violation for publish" in violations.seen[0]
    finally:
        await client.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway_state(secured: NatsServer) -> AsyncIterator[object]:
    settings = GatewaySettings(
        nats_url=secured.url, nats_user="sie-gateway", nats_password=PASSWORDS["gateway"]
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        state = app.state.gateway
        deadline = time.monotonic() + 30
        while state.dispatcher is None:
            assert time.monotonic() < deadline, "the gateway never joined the secured NATS"
            await asyncio.sleep(0.05)
        yield state


async def test_heartbeats_count_only_from_worker_credentials(
    secured: NatsServer, gateway_state: object
) -> None:
    """A forged heartbeat under the gateway's or sie-config's credentials never reaches the gateway's
    worker table; the same heartbeat under a worker's does."""
    workers = gateway_state.workers  # type: ignore[attr-defined]
    beat = encode_heartbeat(Heartbeat("w-forged", True, "default", "default", "default", time.time()))
    for role in ("gateway", "config"):
        client = await as_role(secured, role, Violations())
        await client.publish(health_subject("w-forged"), beat)
        await client.flush()
        await client.close()
    await asyncio.sleep(0.5)
    assert [w.name for w in workers.all()] == []
    client = await as_role(secured, "worker", Violations())
    await client.publish(health_subject("w-forged"), beat)
    await client.flush()
    await client.close()
    deadline = time.monotonic() + 5
    while [w.name for w in workers.all()] != ["w-forged"]:
        assert time.monotonic() < deadline, "a worker's heartbeat never arrived"
        await asyncio.sleep(0.05)


async def test_each_role_connects_with_its_own_credentials(secured: NatsServer) -> None:
    for role in ROLES:
        client = await asyncio.wait_for(connect(access(secured, role), f"test-{role}"), 10)
        assert client.is_connected
        await client.close()


async def test_credentials_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """M7: a URL carrying user info, and a password by setting, while NATS is unreachable: what the
    connection logs of its failed attempts names neither."""
    url = "nats://sie-gateway:hunter2@127.0.0.1:1"
    target = NatsAccess([url], "sie-gateway", "hunter3")
    with caplog.at_level(logging.INFO), pytest.raises(TimeoutError):
        await asyncio.wait_for(connect(target, "test"), 1.5)
    assert "NATS: ConnectionRefusedError" in caplog.text
    assert "hunter2" not in caplog.text and "hunter3" not in caplog.text
    assert "hunter" not in repr(target)
    assert redacted(url) == "nats://***@127.0.0.1:1"


async def test_settings_carry_every_kind_of_credential(tmp_path: Path) -> None:
    creds = tmp_path / "user.creds"
    settings = GatewaySettings(
        nats_url="tls://nats:4222", nats_token="tok", nats_creds=creds, nats_user="u", nats_password="p"
    )
    options = settings.nats_access().options()
    assert options == {"user": "u", "password": "p", "token": "tok", "user_credentials": str(creds)}
    assert "p" not in repr(settings.nats_password)


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed, made by the openssl command."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=folder)

    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=sie-test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
    )
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"


async def test_tls_by_setting_reaches_a_tls_only_server(tmp_path: Path) -> None:
    """SIE_NATS_TLS_CA: a NATS that speaks only TLS is reached with the operator's CA, and a client
    that does not trust that CA is refused."""
    ca, cert, key = _certificates(tmp_path)
    port = _free_nats_port()
    conf = tmp_path / "nats.conf"
    config = json.loads(server_config("127.0.0.1", port, tmp_path / "js", PASSWORDS))
    conf.write_text(json.dumps({**config, "tls": {"cert_file": str(cert), "key_file": str(key)}}))
    process = subprocess.Popen(
        [nats_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        url = f"tls://127.0.0.1:{port}"
        trusted = NatsAccess([url], "sie-worker", PASSWORDS["worker"], tls_ca=ca)
        client = await asyncio.wait_for(connect(trusted, "tls-test"), 15)
        assert client.is_connected
        await client.close()
        with pytest.raises((ssl.SSLError, OSError, nats.errors.Error, TimeoutError)):
            await nats.connect(
                url, user="sie-worker", password=PASSWORDS["worker"], allow_reconnect=False, connect_timeout=3
            )
    finally:
        process.terminate()
        process.wait(timeout=10)
