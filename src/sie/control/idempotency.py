"""``Idempotency-Key`` for config writes: a replay gets the first answer, byte for byte.

Kept in process (the service is a single replica), the last 1000 keys, each with a hash of the body
it came with: the same key with another body is refused (422), a duplicate that arrives while the
first is still running waits for it and then gets its answer.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

CAPACITY: Final = 1000


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    body_hash: str


class KeyMismatch(Exception):
    """The key was used with another body."""


class OwnerFailed(Exception):
    """The first request with this key was cancelled before it had an answer to replay."""


class Evicted(Exception):
    """The first request succeeded, but its answer left the cache before this one could read it."""


class IdempotencyCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        # key -> (body hash, the first request's end: True, or the error it ended with)
        self._running: dict[str, tuple[str, asyncio.Future[bool | BaseException]]] = {}

    async def claim(self, key: str, body_hash: str) -> Answer | None:
        """The answer to replay, or None when this request now owns the key (and must ``finish`` or
        ``abandon`` it)."""
        waited = False
        while True:
            answer = self._answers.get(key)
            if answer is not None:
                if answer.body_hash != body_hash:
                    raise KeyMismatch
                return answer
            if waited:
                raise Evicted
            running = self._running.get(key)
            if running is None:
                self._running[key] = (body_hash, asyncio.get_running_loop().create_future())
                return None
            if running[0] != body_hash:
                raise KeyMismatch
            ended = await asyncio.shield(running[1])
            if isinstance(ended, asyncio.CancelledError):
                raise OwnerFailed
            if isinstance(ended, BaseException):
                raise ended  # a duplicate that waited gets the first one's refusal
            waited = True

    def finish(self, key: str, answer: Answer) -> None:
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > self._capacity:
            self._answers.popitem(last=False)
        self._settle(key, True)

    def abandon(self, key: str, error: BaseException) -> None:
        self._settle(key, error)

    def _settle(self, key: str, ended: bool | BaseException) -> None:
        running = self._running.pop(key, None)
        if running is not None and not running[1].done():
            running[1].set_result(ended)
