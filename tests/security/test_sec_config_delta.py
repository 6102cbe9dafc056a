"""Config deltas on NATS are only a trigger (audit H4): anyone who can publish on
``sie.config.models.*`` can write any body and any ``router_id``, so a follower fetches what sie-config
holds over its authenticated HTTP API and never applies a delta's ``model_config``.

A real ``nats-server`` and a real ``sie-config`` (the installed command, on loopback); the follower
is the one gateways and workers run, subscribed the way they subscribe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import msgspec
import nats
import pytest
import pytest_asyncio
from nats.aio.client import Client

from sie.catalog.follower import ConfigFollower, FollowerSettings
from sie.catalog.model_config import ModelConfig
from sie.queue.contract import CONFIG_ALL_SUBJECT, config_subject
from sie.settings.common import PACKAGED_BUNDLES_DIR
from tests.conftest import NatsServer
from tests.e2e.cluster import ConfigService
from tests.security.test_sec_config_service import DENSE, model_yaml

ADMIN, READ = "admin-secret", "read-secret"

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, nats_server: NatsServer) -> Iterator[ConfigService]:
    root = tmp_path_factory.mktemp("sie-config")
    (root / "models").mkdir()
    env = {
        "SIE_NATS_URL": nats_server.url,
        "SIE_ADMIN_TOKEN": ADMIN,
        "SIE_CONFIG_READ_TOKEN": READ,
        "SIE_CONFIG_STORE_DIR": str(root / "store"),
        "SIE_MODELS_DIR": str(root / "models"),
        "SIE_BUNDLES_DIR": str(PACKAGED_BUNDLES_DIR),
        "POD_NAME": "sie-config-0",
    }
    service = ConfigService(root, env)
    service.start()
    try:
        service.wait_nats()
        yield service
    finally:
        service.client.close()
        service.stop()


class Following:
    """A follower as a gateway runs it: bootstrapped from the export, deltas from ``_all``."""

    def __init__(self, follower: ConfigFollower, client: Client) -> None:
        self.follower, self.client = follower, client
        self.applied: list[dict[str, ModelConfig]] = []

    async def until(self, model_id: str, timeout_s: float) -> float:
        started = time.monotonic()
        while model_id not in self.follower.configs:
            assert time.monotonic() - started < timeout_s, f"{model_id} never reached the follower"
            await asyncio.sleep(0.05)
        return time.monotonic() - started


@pytest_asyncio.fixture(loop_scope="module")
async def following(service: ConfigService, nats_server: NatsServer) -> AsyncIterator[Following]:
    applied: list[dict[str, ModelConfig]] = []

    async def apply(configs: dict[str, ModelConfig]) -> None:
        applied.append(configs)

    settings = FollowerSettings(service.url, READ, 30, 0, ["sie-config"])
    follower = ConfigFollower(settings, apply, "gateway")
    client = await nats.connect(nats_server.url)
    state = Following(follower, client)
    state.applied = applied

    async def on_delta(message: nats.aio.msg.Msg) -> None:
        await follower.on_delta(message.data)

    await client.subscribe(CONFIG_ALL_SUBJECT, cb=on_delta)
    stop = asyncio.Event()
    runner = asyncio.create_task(follower.run(stop))
    deadline = time.monotonic() + 20
    while follower.epoch is None:
        assert time.monotonic() < deadline, "the follower never bootstrapped"
        await asyncio.sleep(0.05)
    try:
        yield state
    finally:
        stop.set()
        await runner
        await client.close()
        await follower.close()


def forged(model_id: str, text: str, epoch: int) -> bytes:
    """A delta in the public wire format, as any pod on NATS can publish it."""
    return msgspec.json.encode(
        {
            "router_id": "sie-config",
            "bundle_id": "default",
            "epoch": epoch,
            "bundle_config_hash": "0" * 64,
            "model_id": model_id,
            "profiles_added": ["default"],
            "model_config": text,
            "affected_bundles": ["default"],
        }
    )


def fetches(service: ConfigService) -> dict[str, float]:
    """How often each of the follower's reads was served, from sie-config's own counter."""
    text = service.client.get("/metrics", headers={"Authorization": f"Bearer {READ}"}).text
    counts = {"/v1/configs/epoch": 0.0, "/v1/configs/export": 0.0}
    for line in text.splitlines():
        if line.startswith("sie_config_http_requests_total"):
            for path in counts:
                if f'path="{path}"' in line:
                    counts[path] += float(line.rsplit(" ", 1)[1])
    return counts


async def test_a_forged_delta_changes_nothing_and_a_real_write_still_arrives(
    following: Following, service: ConfigService
) -> None:
    follower, client = following.follower, following.client
    epoch = follower.epoch or 0
    for model_id, adapter in (
        ("evil/torch", "sie.adapters.dense_torch:torch"),
        ("evil/file", "/tmp/evil.py:Evil"),
        ("evil/plain", DENSE),  # a well-formed config sie-config never wrote is no config either
    ):
        for subject in (CONFIG_ALL_SUBJECT, config_subject("default")):
            await client.publish(subject, forged(model_id, model_yaml(model_id, adapter), epoch + 1))
    await client.flush()
    await asyncio.sleep(1.5)
    assert not [m for m in follower.configs if m.startswith("evil/")]
    assert not [c for c in following.applied if any(m.startswith("evil/") for m in c)]
    assert follower.epoch == epoch  # the forged epoch is not taken either

    assert service.post(model_yaml("acme/real")).status_code == 201
    took = await following.until("acme/real", timeout_s=3)
    assert took < 3
    assert follower.epoch == epoch + 1


async def test_a_flood_of_deltas_costs_at_most_one_cheap_read_per_interval(
    following: Following, service: ConfigService
) -> None:
    """Each look a delta sets off reads the epoch; the export (under the write lock) only when the
    epoch moved, which forged deltas cannot make it do."""
    await asyncio.sleep(1)  # whatever the previous test set off has settled
    before = await asyncio.to_thread(fetches, service)
    started = time.monotonic()
    payload = forged("evil/flood", model_yaml("evil/flood"), 10**9)
    while time.monotonic() - started < 2:
        for _ in range(200):
            await following.client.publish(CONFIG_ALL_SUBJECT, payload)
        await following.client.flush()
    await asyncio.sleep(1)
    elapsed = time.monotonic() - started
    after = await asyncio.to_thread(fetches, service)
    epochs = after["/v1/configs/epoch"] - before["/v1/configs/epoch"]
    exports = after["/v1/configs/export"] - before["/v1/configs/export"]
    assert 1 <= epochs <= elapsed / 0.5 + 2, (epochs, elapsed)
    assert exports == 0
    assert "evil/flood" not in following.follower.configs
