"""The payload store on a local folder and on a real S3 API (moto's server): what the gateway puts
the worker reads back byte for byte, deletes are idempotent, and a missing or unsafe key is the
item's ``INVALID_INPUT``, not a crash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sie.errors import RULES, rule_for
from sie.queue.payloads import PayloadMissing, PayloadStore, item_key, score_key
from sie.wire.errors import ErrorCode
from sie.wire.requests import ImageInput, Item
from tests.s3 import moto_s3

BIG = Item(id="big", text="x" * (2 * 1024 * 1024), images=[ImageInput(data=b"\x89PNG" + bytes(range(256)))])


async def _round_trip(store: PayloadStore) -> None:
    await store.put_item(item_key("r1", 3), BIG)
    assert await store.item(item_key("r1", 3)) == BIG
    await store.put_score(score_key("r1"), Item(text="q"), [Item(text="a"), BIG])
    score = await store.score(score_key("r1"))
    assert (score.query, score.items) == (Item(text="q"), [Item(text="a"), BIG])
    await store.delete([item_key("r1", 3), score_key("r1"), item_key("r1", 4)])  # one never written
    with pytest.raises(PayloadMissing):
        await store.item(item_key("r1", 3))
    for unsafe in ("../etc/passwd", "a/b.bin", ""):
        with pytest.raises(PayloadMissing):
            await store.get(unsafe)
    assert rule_for(PayloadMissing("gone")) is RULES[ErrorCode.INVALID_INPUT]  # answered, never retried


async def test_a_local_folder(tmp_path: Path) -> None:
    store = PayloadStore(str(tmp_path / "payloads"))
    await _round_trip(store)
    assert list((tmp_path / "payloads").iterdir()) == []


async def test_s3_through_fsspec(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_s3("payloads") as s3:
        for key, value in s3.env().items():
            monkeypatch.setitem(os.environ, key, value)
        store = PayloadStore("s3://payloads/cluster")
        await _round_trip(store)
        listed = s3.client().list_objects_v2(Bucket="payloads").get("Contents", [])
        assert listed == []
