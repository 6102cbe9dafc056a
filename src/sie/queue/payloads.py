"""Items too big for a NATS message travel through a shared store, by reference.

The gateway writes an item whose work item would pass ``INLINE_THRESHOLD_BYTES`` to
``SIE_PAYLOAD_STORE_URL`` (a folder every process sees, or ``s3://bucket/prefix`` / ``gs://...``
through the same fsspec layer as the cluster weight cache) under ``{request_id}_{index}.bin`` (a
score request: ``{request_id}_score.bin`` holding ``{"query", "items"}``), sends the bare key as
``payload_ref`` (``query_payload_ref``), and deletes the objects once the request is answered. The
worker reads them back before running the item.

A gateway killed between its write and its delete leaves the tenant's payload behind, so gateways
also sweep the store (``sweep_payloads``): at start and every half ``SIE_PAYLOAD_STORE_TTL``, objects
written before the TTL are deleted. The TTL outlives the work stream's max age, so no item still in
a stream refers to what is swept; only names a gateway writes are touched, at the store's top level.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from sie.errors import SieError
from sie.weights.remote_fs import filesystem
from sie.wire.errors import ErrorCode
from sie.wire.requests import Item

log = logging.getLogger(__name__)

_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]+$")
_WRITTEN: Final = re.compile(r"^[A-Za-z0-9_.-]+_(?:[0-9]+|score)\.bin$")  # item_key and score_key
# When each filesystem says an object was last written: a local folder's ``mtime`` (seconds), S3's
# ``LastModified`` (a datetime), GCS's ``updated`` (ISO 8601).
_WRITTEN_AT: Final = ("mtime", "LastModified", "updated")


class PayloadMissing(SieError):
    """A referenced payload that is not in the store (or no store is configured): the item is
    answered ``INVALID_INPUT``, since retrying cannot bring it back."""

    code = ErrorCode.INVALID_INPUT


class ScorePayload(msgspec.Struct):
    query: Item
    items: list[Item]


_ITEM: Final = msgspec.msgpack.Decoder(Item)
_SCORE: Final = msgspec.msgpack.Decoder(ScorePayload)
_ENCODER: Final = msgspec.msgpack.Encoder()


def item_key(request_id: str, index: int) -> str:
    return f"{request_id}_{index}.bin"


def score_key(request_id: str) -> str:
    return f"{request_id}_score.bin"


class PayloadStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self._fs, self._root = filesystem(url)
        if not self._fs.exists(self._root):
            self._fs.makedirs(self._root, exist_ok=True)

    def _path(self, key: str) -> str:
        if not _KEY.match(key) or ".." in key:
            raise PayloadMissing(f"invalid payload key '{key}'")
        return f"{self._root}/{key}"

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._fs.pipe_file, self._path(key), data)

    async def get(self, key: str) -> bytes:
        try:
            return bytes(await asyncio.to_thread(self._fs.cat_file, self._path(key)))
        except FileNotFoundError:
            raise PayloadMissing(f"payload '{key}' is not in the store") from None

    async def delete(self, keys: list[str]) -> None:
        def remove() -> None:
            for key in keys:
                with contextlib.suppress(FileNotFoundError):
                    self._fs.rm_file(self._path(key))

        await asyncio.to_thread(remove)

    async def sweep(self, before: float) -> list[str]:
        """Delete the objects a gateway wrote before ``before`` (Unix seconds); the keys deleted.
        Anything else in the store (another name, a folder, an object without a date) stays."""

        def sweep() -> list[str]:
            self._fs.invalidate_cache(self._root)  # a listing fsspec cached would hide new objects
            swept: list[str] = []
            for entry in self._fs.ls(self._root, detail=True):
                key = str(entry["name"]).rstrip("/").rpartition("/")[2]
                if entry.get("type") != "file" or not _WRITTEN.match(key):
                    continue
                written = _written_at(entry)
                if written is None or written >= before:
                    continue
                with contextlib.suppress(FileNotFoundError):  # another gateway's sweep was first
                    self._fs.rm_file(self._path(key))
                swept.append(key)
            return swept

        return await asyncio.to_thread(sweep)

    async def put_item(self, key: str, item: Item) -> None:
        await self.put(key, _ENCODER.encode(item))

    async def put_score(self, key: str, query: Item, items: list[Item]) -> None:
        await self.put(key, _ENCODER.encode(ScorePayload(query, items)))

    async def item(self, key: str) -> Item:
        return _ITEM.decode(await self.get(key))

    async def score(self, key: str) -> ScorePayload:
        return _SCORE.decode(await self.get(key))


def _written_at(entry: dict[str, Any]) -> float | None:
    for field in _WRITTEN_AT:
        value = entry.get(field)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = datetime.fromisoformat(value)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return None


async def sweep_payloads(
    store: PayloadStore, ttl_s: float, stop: asyncio.Event, clock: Callable[[], float] = time.time
) -> None:
    """A gateway's sweep of ``store``: at once, then every ``ttl_s / 2`` until ``stop``; a failed
    sweep (the store unreachable) is logged and tried again next time."""
    while not stop.is_set():
        try:
            swept = await store.sweep(clock() - ttl_s)
        except Exception:
            log.warning("sweeping the payload store %s failed", store.url, exc_info=True)
        else:
            if swept:
                log.info("swept %d payloads older than %.0f s from %s", len(swept), ttl_s, store.url)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ttl_s / 2)
