"""Work items JetStream gave up on (``max_deliver`` deliveries, none acked) go to a dead-letter stream,
and their requests are answered at once instead of waiting out the timeout.

JetStream announces each such item with a ``MAX_DELIVERIES`` advisory. One gateway of the cluster (a
queue group) takes it: it writes what the item was (``contract.DeadLetter``: ids, model, pool,
deliveries, the answer, timestamps; never the tenant's texts or images) to ``DEAD_LETTERS`` (subject
``sie.dlq.{model}``, deduplicated by stream and sequence, bounded: ``streams.DeadLetterLimits``),
answers the item's inbox with an ``INTERNAL_ERROR`` result (so whichever gateway holds the request
replies), and deletes the item from the work stream.

An advisory is acted on only for a pool's work stream (its name and its subjects say so) and a
consumer that stream has: one naming the pools bucket, the dead letters or any other stream, from a
peer that may publish there at all, changes nothing. Every refusal is counted by a fixed reason.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from sie.gateway.metrics import AdvisoryIgnored, GatewayMetrics
from sie.queue.contract import (
    DEAD_LETTER_PREFIX,
    MAX_DELIVERIES_ADVISORY_PREFIX,
    ContractError,
    DeadLetter,
    MaxDeliveries,
    WorkItem,
    WorkResult,
    decode_advisory,
    decode_work_item,
    encode_dead_letter,
    encode_message,
    pool_of_stream,
    pool_stream_subjects,
)
from sie.queue.streams import DEAD_LETTER_STREAM, DeadLetterLimits, ensure_dead_letter_stream
from sie.wire.errors import ErrorCode

log = logging.getLogger(__name__)

STREAM: Final = DEAD_LETTER_STREAM
ADVISORY_PREFIX: Final = MAX_DELIVERIES_ADVISORY_PREFIX
QUEUE_GROUP: Final = "sie-gateway-dlq"
REASON: Final = "max_deliveries"
FIELD_CHARS: Final = 256  # a field of a dead letter is an id or a name; a longer one is cut


class DeadLetters:
    def __init__(
        self, client: Client, metrics: GatewayMetrics, limits: DeadLetterLimits, replicas: int = 1
    ) -> None:
        self._client = client
        self._replicas = replicas
        self._jetstream: JetStreamContext = client.jetstream()
        self._metrics = metrics
        self._limits = limits

    async def start(self) -> None:
        await ensure_dead_letter_stream(self._jetstream, self._limits, self._replicas)
        await self._client.subscribe(f"{ADVISORY_PREFIX}.>", queue=QUEUE_GROUP, cb=self._on_advisory)

    async def _on_advisory(self, message: Msg) -> None:
        try:
            advisory = await self._checked(message)
            if advisory is not None:
                await self._dead_letter(advisory)
        except Exception:  # the per-message edge: the next advisory is handled all the same
            log.exception("handling a MAX_DELIVERIES advisory failed")

    async def _checked(self, message: Msg) -> MaxDeliveries | None:
        """The advisory, if it names a consumer of a pool's work stream; None (counted) otherwise."""
        try:
            advisory = decode_advisory(message.data)
        except ContractError as exc:
            self._ignored(AdvisoryIgnored.UNREADABLE, "unreadable MAX_DELIVERIES advisory: %s", exc)
            return None
        if message.subject != f"{ADVISORY_PREFIX}.{advisory.stream}.{advisory.consumer}":
            self._ignored(AdvisoryIgnored.UNREADABLE, "advisory on %s names another", message.subject)
            return None
        pool = pool_of_stream(advisory.stream)
        try:
            info = await self._jetstream.stream_info(advisory.stream) if pool else None
        except (APIError, ValueError):  # none of that name, or a name no stream can have
            info = None
        if pool is None or info is None or info.config.subjects != pool_stream_subjects(pool):
            self._ignored(AdvisoryIgnored.NOT_A_WORK_STREAM, "advisory names stream %r", advisory.stream)
            return None
        try:
            await self._jetstream.consumer_info(advisory.stream, advisory.consumer)
        except (APIError, ValueError):
            self._ignored(
                AdvisoryIgnored.UNKNOWN_CONSUMER, "advisory names no consumer of %s", advisory.stream
            )
            return None
        return advisory

    def _ignored(self, reason: AdvisoryIgnored, text: str, value: object) -> None:
        self._metrics.dlq_ignored.labels(reason.value).inc()
        log.warning("ignoring a MAX_DELIVERIES advisory (%s): " + text, reason.value, _short(str(value)))

    async def _dead_letter(self, advisory: MaxDeliveries) -> None:
        stream, consumer, seq = advisory.stream, advisory.consumer, advisory.stream_seq
        try:
            original = await self._jetstream.get_msg(stream, seq)
        except NotFoundError:
            return  # acked or aged out meanwhile
        try:
            work: WorkItem | None = decode_work_item(original.data or b"")
        except ContractError:
            work = None  # still moved out of the way, as what little the advisory says
        error = f"No worker could run this item ({advisory.deliveries} deliveries); moved to {STREAM}"
        letter = _letter(advisory, original.subject, work, error)
        token = (original.subject or "").rpartition(".")[2] or "unknown"  # the work subject's model
        try:
            headers = {"Nats-Msg-Id": f"{stream}-{seq}"}
            await self._jetstream.publish(
                f"{DEAD_LETTER_PREFIX}.{token}", encode_dead_letter(letter), headers=headers
            )
        except Exception:  # the item is answered and removed all the same: it must not stay a poison
            self._metrics.dlq_republish_failures.labels(stream, consumer).inc()
            log.warning("writing the dead letter of %s %s failed", stream, seq, exc_info=True)
        self._metrics.dlq_events.labels(stream, consumer).inc()
        if work is not None and work.reply_subject.startswith("_INBOX."):
            result = WorkResult(
                work.work_item_id,
                work.request_id,
                work.item_index,
                False,
                error=error,
                error_code=ErrorCode.INTERNAL_ERROR.value,
            )
            await self._client.publish(work.reply_subject, encode_message(result))
        with contextlib.suppress(NotFoundError):  # another gateway, or the stream's age limit, was first
            await self._jetstream.delete_msg(stream, seq)
        log.warning("work item %s of %s dead-lettered after %s deliveries", seq, stream, advisory.deliveries)


def _short(value: str) -> str:
    return value if len(value) <= FIELD_CHARS else f"{value[:FIELD_CHARS]}..."


def _letter(advisory: MaxDeliveries, subject: str | None, work: WorkItem | None, error: str) -> DeadLetter:
    """What the dead-letter stream keeps: where the item was and what it was for, its payload left out."""
    letter = DeadLetter(
        stream=advisory.stream,
        consumer=advisory.consumer,
        stream_seq=advisory.stream_seq,
        deliveries=advisory.deliveries,
        reason=REASON,
        error=error,
        dead_at=time.time(),
        subject=subject,
    )
    if work is None:
        return letter
    letter.work_item_id = _short(work.work_item_id)
    letter.request_id = _short(work.request_id)
    letter.item_index = work.item_index
    letter.total_items = work.total_items
    letter.operation = _short(work.operation)
    letter.model_id = _short(work.model_id)
    letter.pool_name = _short(work.pool_name)
    letter.machine_profile = _short(work.machine_profile)
    letter.router_id = _short(work.router_id)
    letter.timestamp = work.timestamp
    letter.deadline = work.deadline
    return letter
