"""The follower's delta rules: a delta from a trusted producer makes it fetch sie-config's export,
nothing of the delta's body is applied, an untrusted or malformed one sets off nothing. sie-config
runs in process (``httpx.ASGITransport``), with no NATS: the test hands the follower the deltas."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
import yaml

from sie.catalog.follower import ConfigFollower, FollowerSettings, trusted
from sie.catalog.model_config import ModelConfig
from sie.control.app import create_app
from sie.settings.control import ConfigServiceSettings


def config(sie_id: str) -> dict[str, object]:
    return {
        "sie_id": sie_id,
        "hf_id": "sentence-transformers/all-MiniLM-L6-v2",
        "profiles": {
            "default": {
                "max_batch_tokens": 8192,
                "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder",
            }
        },
    }


def test_a_producer_is_trusted_by_its_id_or_a_dashed_prefix() -> None:
    assert trusted("sie-config", ["sie-config"])
    assert trusted("sie-config-7d9f-abc", ["sie-config"])
    assert not trusted("sie-configurator", ["sie-config"])
    assert not trusted("mallory", ["sie-config", "other"])


def delta(producer: str, sie_id: str) -> bytes:
    text = yaml.safe_dump(config(sie_id))
    return msgspec.json.encode({"router_id": producer, "epoch": 99, "model_id": sie_id, "model_config": text})


async def test_a_trusted_delta_fetches_the_export_and_its_body_is_never_applied(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    app = create_app(ConfigServiceSettings(models_dir=str(tmp_path / "models")))
    transport = httpx.ASGITransport(app=app)
    applied: list[dict[str, ModelConfig]] = []

    async def apply(configs: dict[str, ModelConfig]) -> None:
        applied.append(configs)

    settings = FollowerSettings("http://config", None, 30, 0, ["sie-config"])
    follower = ConfigFollower(settings, apply, "test", transport=transport)
    stop = asyncio.Event()
    runner = asyncio.create_task(follower.run(stop))
    async with httpx.AsyncClient(transport=transport, base_url="http://config") as client:
        while follower.epoch is None:
            await asyncio.sleep(0.01)
        posted = await client.post("/v1/configs/models", content=yaml.safe_dump(config("acme/a")))
        assert posted.status_code == 201  # no NATS here: nothing tells the follower but the test
        await follower.on_delta(delta("mallory", "acme/a"))  # untrusted: sets off nothing
        await follower.on_delta(b"{not json")  # malformed: ignored
        await asyncio.sleep(0.3)
        assert "acme/a" not in follower.configs
        started = time.monotonic()
        await follower.on_delta(delta("sie-config-0", "acme/ghost"))  # the body names another model
        while "acme/a" not in follower.configs:
            assert time.monotonic() - started < 2, "the delta never set off a fetch"
            await asyncio.sleep(0.01)
    stop.set()
    await runner
    await follower.close()
    assert set(follower.configs) == {"acme/a"}  # what sie-config holds, not what the delta said
    assert all("acme/ghost" not in configs for configs in applied)
