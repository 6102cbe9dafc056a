"""Items too big for a NATS message travel through a shared store, by reference.

The gateway writes an item whose work item would pass ``INLINE_THRESHOLD_BYTES`` to
``SIE_PAYLOAD_STORE_URL`` (a folder every process sees, or ``s3://bucket/prefix`` / ``gs://...``
through the same fsspec layer as the cluster weight cache) under ``{request_id}_{index}.bin`` (a
score request: ``{request_id}_score.bin`` holding ``{"query", "items"}``), sends the bare key as
``payload_ref`` (``query_payload_ref``), and deletes the objects once the request is answered. The
worker reads them back before running the item.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Final

import msgspec

from sie.errors import SieError
from sie.weights.remote_fs import filesystem
from sie.wire.errors import ErrorCode
from sie.wire.requests import Item

_KEY: Final = re.compile(r"^[A-Za-z0-9_.-]+$")


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

    async def put_item(self, key: str, item: Item) -> None:
        await self.put(key, _ENCODER.encode(item))

    async def put_score(self, key: str, query: Item, items: list[Item]) -> None:
        await self.put(key, _ENCODER.encode(ScorePayload(query, items)))

    async def item(self, key: str) -> Item:
        return _ITEM.decode(await self.get(key))

    async def score(self, key: str) -> ScorePayload:
        return _SCORE.decode(await self.get(key))
