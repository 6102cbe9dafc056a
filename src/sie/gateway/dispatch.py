"""Work items out on JetStream, their results back on one NATS core inbox, gathered per request.

Each gateway process has a random ``router_id`` and one subscription on ``_INBOX.{router_id}.>``; a
request registers a collector under its id before anything is published, the inbox fills the
collector's slots by ``item_index``, and the request's task awaits the last one (or its timeout).
JetStream holds the items durably until a worker acks them, so a worker that dies mid-batch only delays
its items (redelivered to another worker) and the first result for a slot is the one kept: nothing is
answered twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from sie.gateway.errors import PublishFailed
from sie.queue.contract import ContractError, WorkItem, WorkResult, decode_work_result, encode_message
from sie.queue.streams import ensure_work_stream

log = logging.getLogger(__name__)


@dataclass
class Collector:
    slots: list[WorkResult | None]
    done: asyncio.Future[None]
    missing: int = field(init=False)
    published_at: float = 0.0

    def __post_init__(self) -> None:
        self.missing = len(self.slots)

    def put(self, result: WorkResult) -> None:
        index = result.item_index
        if not 0 <= index < len(self.slots) or self.slots[index] is not None:
            return  # out of range, or a redelivered item's second answer: the first one stands
        self.slots[index] = result
        self.missing -= 1
        if self.missing == 0 and not self.done.done():
            self.done.set_result(None)


class Dispatcher:
    def __init__(self, client: Client, published: Callable[[str, float], None] | None = None) -> None:
        self.client = client
        self._published = published  # (operation, seconds until JetStream acked every item)
        self.router_id = uuid.uuid4().hex
        self._jetstream: JetStreamContext = client.jetstream()
        self._collectors: dict[str, Collector] = {}
        self._streams: set[str] = set()

    async def start(self) -> None:
        await self.client.subscribe(f"_INBOX.{self.router_id}.>", cb=self._on_inbox)

    def new_request_id(self) -> str:
        return uuid.uuid4().hex

    def reply_subject(self, request_id: str) -> str:
        return f"_INBOX.{self.router_id}.{request_id}"

    async def _on_inbox(self, message: Msg) -> None:
        try:
            result = decode_work_result(message.data)
        except ContractError as exc:
            log.warning("dropping an undecodable result on %s: %s", message.subject, exc)
            return
        collector = self._collectors.get(result.request_id)
        if collector is None:
            return  # late: its request timed out
        collector.put(result)

    async def ensure_stream(self, pool: str) -> None:
        if pool not in self._streams:
            await ensure_work_stream(self._jetstream, pool)
            self._streams.add(pool)

    def forget_streams(self) -> None:
        """After a reconnect the server may be a new one: streams are checked again."""
        self._streams.clear()

    async def run(
        self, request_id: str, subject: str, items: list[WorkItem], timeout_s: float
    ) -> list[WorkResult | None]:
        """Publish every item, await every result; on timeout the slots still empty are None."""
        loop = asyncio.get_running_loop()
        collector = Collector([None] * len(items), loop.create_future())
        self._collectors[request_id] = collector
        try:
            # The acks are awaited beside the results, not before them: a result may come back before
            # JetStream's ack does, and waiting for the ack first added its round trip to every request.
            acks = asyncio.ensure_future(
                asyncio.gather(*(self._jetstream.publish(subject, encode_message(item)) for item in items))
            )
            collector.published_at = time.monotonic()
            if self._published is not None and items:
                report, operation, since = self._published, items[0].operation, collector.published_at
                acks.add_done_callback(
                    lambda done: (
                        None
                        if done.cancelled() or done.exception()
                        else report(operation, time.monotonic() - since)
                    )
                )
            deadline = collector.published_at + timeout_s
            waiting: set[asyncio.Future[Any]] = {acks, collector.done}
            while not collector.done.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                finished, waiting = await asyncio.wait(
                    waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if acks in finished and acks.exception() is not None:
                    exc = acks.exception()
                    raise PublishFailed(str(exc) or type(exc).__name__) from exc
            if not acks.done():
                acks.add_done_callback(_log_late_failure)
            return collector.slots
        finally:
            del self._collectors[request_id]


def _log_late_failure(acks: asyncio.Future[Any]) -> None:
    """An ack that fails after the results came back changes nothing for the caller."""
    if not acks.cancelled() and acks.exception() is not None:
        log.warning("a JetStream ack failed after its results arrived: %s", acks.exception())
