"""Work items JetStream gave up on (``max_deliver`` deliveries, none acked) go to a dead-letter stream,
and their requests are answered at once instead of waiting out the timeout.

JetStream announces each such item with a ``MAX_DELIVERIES`` advisory. One gateway of the cluster (a
queue group) takes it: it copies the original work item to ``DEAD_LETTERS`` (subject
``sie.dlq.{model}``, the advisory's details in headers; deduplicated by stream and sequence), answers
the item's inbox with an ``INTERNAL_ERROR`` result (so whichever gateway holds the request replies),
and deletes the item from the work stream.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

from sie.gateway.metrics import GatewayMetrics
from sie.queue.contract import (
    DEAD_LETTER_PREFIX,
    ContractError,
    WorkResult,
    decode_work_item,
    encode_message,
    subject_token,
)
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

STREAM: Final = "DEAD_LETTERS"
ADVISORY: Final = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>"
QUEUE_GROUP: Final = "sie-gateway-dlq"
MAX_AGE_S: Final = 86_400.0
DEDUP_WINDOW_S: Final = 120.0


class DeadLetters:
    def __init__(self, client: Client, metrics: GatewayMetrics) -> None:
        self._client = client
        self._jetstream: JetStreamContext = client.jetstream()
        self._metrics = metrics

    async def start(self) -> None:
        try:
            await self._jetstream.stream_info(STREAM)
        except NotFoundError:
            await self._jetstream.add_stream(
                StreamConfig(
                    name=STREAM,
                    subjects=[f"{DEAD_LETTER_PREFIX}.>"],
                    storage=StorageType.FILE,
                    max_age=MAX_AGE_S,
                    duplicate_window=DEDUP_WINDOW_S,
                )
            )
        await self._client.subscribe(ADVISORY, queue=QUEUE_GROUP, cb=self._on_advisory)

    async def _on_advisory(self, message: Msg) -> None:
        try:
            advisory = json.loads(message.data)
            stream, consumer, seq = advisory["stream"], advisory["consumer"], int(advisory["stream_seq"])
        except (ValueError, KeyError, TypeError):
            log.warning("unreadable MAX_DELIVERIES advisory: %r", message.data[:200])
            return
        try:
            original = await self._jetstream.get_msg(stream, seq)
        except NotFoundError:
            return  # acked or aged out meanwhile
        data = original.data or b""
        try:
            work = decode_work_item(data)
        except ContractError:
            work = None
        model = subject_token(work.model_id) if work is not None else "unknown"
        headers = {
            "Nats-Msg-Id": f"{stream}-{seq}",
            "Sie-Stream": stream,
            "Sie-Consumer": consumer,
            "Sie-Stream-Seq": str(seq),
            "Sie-Deliveries": str(advisory.get("deliveries", "")),
        }
        await self._jetstream.publish(f"{DEAD_LETTER_PREFIX}.{model}", data, headers=headers)
        self._metrics.dlq_events.labels(stream, consumer).inc()
        if work is not None and work.reply_subject.startswith("_INBOX."):
            deliveries = advisory.get("deliveries", "?")
            result = WorkResult(
                work.work_item_id,
                work.request_id,
                work.item_index,
                False,
                error=f"No worker could run this item ({deliveries} deliveries); moved to {STREAM}",
                error_code=ErrorCode.INTERNAL_ERROR.value,
            )
            await self._client.publish(work.reply_subject, encode_message(result))
        with contextlib.suppress(NotFoundError):  # another gateway, or the stream's age limit, was first
            await self._jetstream.delete_msg(stream, seq)
        log.warning(
            "work item %s of %s dead-lettered after %s deliveries", seq, stream, advisory.get("deliveries")
        )
