"""The follower's delta rules: trusted producers only, the epoch advanced only by the next delta."""

from __future__ import annotations

import asyncio

import msgspec
import yaml

from sie.catalog.follower import ConfigFollower, FollowerSettings, trusted
from sie.catalog.model_config import ModelConfig

CONFIG = {
    "sie_id": "acme/a",
    "hf_id": "sentence-transformers/all-MiniLM-L6-v2",
    "profiles": {
        "default": {"max_batch_tokens": 8192, "adapter_path": "sie.adapters.dense_torch:TorchDenseEncoder"}
    },
}


def test_a_producer_is_trusted_by_its_id_or_a_dashed_prefix() -> None:
    assert trusted("sie-config", ["sie-config"])
    assert trusted("sie-config-7d9f-abc", ["sie-config"])
    assert not trusted("sie-configurator", ["sie-config"])
    assert not trusted("mallory", ["sie-config", "other"])


def delta(epoch: int, producer: str = "sie-config-0", **config: object) -> bytes:
    text = yaml.safe_dump({**CONFIG, **config})
    return msgspec.json.encode(
        {"router_id": producer, "epoch": epoch, "model_id": "acme/a", "model_config": text}
    )


def test_deltas_apply_in_order_and_a_gap_waits_for_the_export() -> None:
    applied: list[dict[str, ModelConfig]] = []

    async def apply(configs: dict[str, ModelConfig]) -> None:
        applied.append(configs)

    async def scenario() -> tuple[ConfigFollower, list[int | None]]:
        settings = FollowerSettings("http://127.0.0.1:9", None, 30, 300, ["sie-config"])
        follower = ConfigFollower(settings, apply, "test")
        follower.epoch = 4  # as after a bootstrap
        epochs: list[int | None] = []
        await follower.on_delta(delta(5, producer="mallory"))  # untrusted: ignored
        epochs.append(follower.epoch)
        await follower.on_delta(delta(5))  # the next one: applied, epoch 5
        epochs.append(follower.epoch)
        await follower.on_delta(delta(5))  # the same again (another bundle's copy): nothing new
        epochs.append(follower.epoch)
        await follower.on_delta(delta(7, max_sequence_length=64))  # 6 was missed: applied, epoch stays
        epochs.append(follower.epoch)
        await follower.on_delta(b"{not json")  # malformed: ignored
        await follower.close()
        return follower, epochs

    follower, epochs = asyncio.run(scenario())
    assert epochs == [4, 5, 5, 5]
    assert len(applied) == 2 and applied[-1]["acme/a"].max_sequence_length == 64
    assert follower._wake.is_set()  # the gap asked for a poll now
