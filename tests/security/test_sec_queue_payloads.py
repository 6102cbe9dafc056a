"""Payload-store objects a gateway never deleted (audit L9): a gateway killed between writing an
item over 1 MiB and answering its request leaves the tenant's payload (often images) in the store.
Gateways sweep what is older than ``SIE_PAYLOAD_STORE_TTL`` (300 s, above the work stream's 120 s
max age, so no item still in a stream can reference it), at start and every half TTL, on a folder
and on a real S3 API (moto's server) alike; objects a gateway never writes are left alone."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from sie.gateway.app import create_app
from sie.queue.payloads import PayloadStore, item_key, score_key
from sie.queue.streams import STREAM_MAX_AGE_S
from sie.settings.gateway import GatewaySettings
from sie.wire.requests import ImageInput, Item
from tests.s3 import moto_s3

PAYLOAD = Item(text="a tenant's text", images=[ImageInput(data=b"\x89PNG" + bytes(64))])


async def test_a_folder_store_sweeps_only_old_payloads(tmp_path: Path) -> None:
    folder = tmp_path / "payloads"
    store = PayloadStore(str(folder))
    for key in (item_key("dead", 0), item_key("dead", 1), item_key("live", 0)):
        await store.put_item(key, PAYLOAD)
    await store.put_score(score_key("dead"), PAYLOAD, [PAYLOAD])
    (folder / "README.txt").write_text("an operator's file")
    (folder / "nested").mkdir()
    (folder / "nested" / item_key("deeper", 0)).write_bytes(b"x")
    long_ago = time.time() - 3600
    for name in (item_key("dead", 0), item_key("dead", 1), score_key("dead"), "README.txt"):
        os.utime(folder / name, (long_ago, long_ago))
    swept = await store.sweep(before=time.time() - 600)
    assert sorted(swept) == sorted([item_key("dead", 0), item_key("dead", 1), score_key("dead")])
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([item_key("live", 0), "README.txt", "nested"])
    assert await store.item(item_key("live", 0)) == PAYLOAD
    assert await store.sweep(before=time.time() - 600) == []  # nothing twice


async def test_an_s3_store_sweeps_only_old_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_s3("payloads") as s3:
        for key, value in s3.env().items():
            monkeypatch.setitem(os.environ, key, value)
        store = PayloadStore("s3://payloads/cluster")
        await store.put_item(item_key("dead", 0), PAYLOAD)
        await store.put_score(score_key("dead"), PAYLOAD, [PAYLOAD])
        s3.put("payloads", "other/" + item_key("elsewhere", 0), b"x")  # another prefix of the bucket
        s3.put("payloads", "cluster/nested/" + item_key("deeper", 0), b"x")
        time.sleep(1.1)  # S3 dates objects to the second
        cutoff = math.floor(time.time())
        await store.put_item(item_key("live", 0), PAYLOAD)
        swept = await store.sweep(before=cutoff)
        assert sorted(swept) == sorted([item_key("dead", 0), score_key("dead")])
        listed = s3.client().list_objects_v2(Bucket="payloads").get("Contents", [])
        assert sorted(o["Key"] for o in listed) == sorted(
            [
                "cluster/" + item_key("live", 0),
                "cluster/nested/" + item_key("deeper", 0),
                "other/" + item_key("elsewhere", 0),
            ]
        )


def test_the_gateway_sweeps_at_start(tmp_path: Path, nats_url: str) -> None:
    folder = tmp_path / "payloads"
    folder.mkdir()
    (folder / item_key("killed", 0)).write_bytes(b"a killed gateway's item")
    long_ago = time.time() - 3600
    os.utime(folder / item_key("killed", 0), (long_ago, long_ago))
    (folder / item_key("fresh", 0)).write_bytes(b"an item in flight")
    settings = GatewaySettings(nats_url=nats_url, payload_store_url=str(folder), payload_store_ttl=600)
    with TestClient(create_app(settings)):
        deadline = time.monotonic() + 10
        while (folder / item_key("killed", 0)).exists():
            assert time.monotonic() < deadline, "the gateway never swept the store"
            time.sleep(0.05)
    assert sorted(p.name for p in folder.iterdir()) == [item_key("fresh", 0)]


def test_the_ttl_must_outlive_the_work_stream() -> None:
    """A TTL at or under the stream's max age could delete a payload an item still in the stream
    references: the gateway refuses to start with one."""
    assert GatewaySettings().payload_store_ttl == 300
    with pytest.raises(ValidationError, match="payload_store_ttl"):
        GatewaySettings(payload_store_ttl=STREAM_MAX_AGE_S)
