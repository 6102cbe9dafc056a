"""The queue worker's pull loop: fetch work items from the lane's durable JetStream consumer, run each
through the engine, reply on its inbox, then ack (or NAK it for later, as the error table says).

JetStream does the hard parts: durability, redelivery of what a dead worker never acked, the shared
durable consumer that spreads a lane's items over its workers. This loop only keeps the engine fed:
fetches are bounded by a budget and by how many items are in flight, which is what the worker
finishes in ``SIE_NATS_HOLD_S`` at its own recent pace (``pace.Pace``: a slow worker does not hoard
what a fast one could start), the fetch wait adapts
(``adaptive.AdaptiveWait``: it widens while the stream is empty and is steered to the p50 target
once work flows), and an item whose deadline has passed is acked unanswered (nobody waits for it). A result is published before the ack, so a
crash in between redelivers the item rather than losing it.

A message that is not a work item is terminated on its first delivery (redelivering it cannot
help); an item told to wait (``QueueAction.RETRY``) is NAKed with a growing delay (first
``SIE_NAK_DELAY_S`` while its model loads, ``SIE_OOM_NAK_DELAY_S`` after out of memory), or a steady
short one when its model failed to load here for a reason that may heal (a full disk: the item is left
for the other workers, and no pull request of this worker is open when it is offered again:
``turned_away``), and answered with its error once a retry could not finish before its deadline
or its last delivery (``work.retry_delay``, ``SIE_MAX_DELIVER``). Each is counted in
``sie_pull_loop_skipped_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from msgspec.structs import replace
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig
from opentelemetry.trace import SpanKind

from sie.catalog.errors import ModelNotFound
from sie.engine.engine import Engine
from sie.errors import QueueAction
from sie.observability import tracing
from sie.observability.metrics import Metrics, SkipReason
from sie.queue.codec import WireRequest, request_of
from sie.queue.connection import until_answered
from sie.queue.contract import (
    STREAM_MAX_AGE_S,
    ContractError,
    Lane,
    WorkItem,
    decode_work_item,
    encode_message,
    lane_consumer,
    pool_stream,
)
from sie.queue.payloads import PayloadMissing, PayloadStore
from sie.queue.streams import (
    ACK_WAIT_S,
    MAX_DELIVER,
    ensure_lane_consumer,
    ensure_work_stream,
    lane_consumer_config,
)
from sie.wire.requests import EncodeRequest, ExtractRequest, ScoreRequest
from sie.worker.adaptive import AdaptiveWait
from sie.worker.grouping import EncodeGroups
from sie.worker.pace import Pace
from sie.worker.turned_away import TurnedAway
from sie.worker.work import NakDelays, Outcome, answered, failed, retry_delay

log = logging.getLogger(__name__)

DRAIN_S: Final = 30.0
PULL_GRACE_S: Final = 1.0
STATUS_HEADER: Final = "Status"
HEARTBEAT_STATUS: Final = "100"
PAUSED_POLL_S: Final = 0.25
CONFIG_WAIT_S: Final = 1  # redelivery delay of an item whose model the config follower may bring


@dataclass(frozen=True)
class Redelivery:
    """How this worker has JetStream redeliver: the lane consumer's ``max_deliver``
    (``SIE_MAX_DELIVER``), the pool stream's age when this worker creates it
    (``SIE_STREAM_MAX_AGE_S``) and copies (``SIE_STREAM_REPLICAS``), and the first NAK waits
    (``SIE_NAK_DELAY_S``, ``SIE_OOM_NAK_DELAY_S``)."""

    max_deliver: int = MAX_DELIVER
    stream_max_age_s: float = STREAM_MAX_AGE_S
    stream_replicas: int = 1
    nak: NakDelays = field(default_factory=NakDelays)


class PullLoop:
    def __init__(
        self,
        engine: Engine,
        client: Client,
        lane: Lane,
        worker_id: str,
        fetch_budget: int = 64,
        max_in_flight: int = 256,
        clock: Callable[[], float] = time.time,
        wait: AdaptiveWait | None = None,
        payloads: PayloadStore | None = None,
        config_pending: Callable[[str], bool] | None = None,
        metrics: Metrics | None = None,
        redelivery: Redelivery = Redelivery(),
        pace: Pace | None = None,
    ) -> None:
        self._engine = engine
        self._groups = EncodeGroups(engine.encode)  # a request's items that arrive together: one call
        self._redelivery = redelivery
        self._skipped = (metrics or Metrics()).pull_skipped
        # With a config service, a model this worker does not know may be one its config has not
        # reached yet: the item waits (NAK) while the follower catches up, instead of a 404.
        self._config_pending = config_pending
        self._client = client
        self._lane = lane
        self._worker_id = worker_id
        self._budget = fetch_budget
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._wait = wait or AdaptiveWait()
        self._pace = pace or Pace()
        self._turned_away = TurnedAway()
        self._payloads = payloads
        self._task: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._held: dict[int, tuple[Msg, float]] = {}  # id(message) -> it, and when it was fetched
        self._room = asyncio.Event()  # set when an item finishes: the loop may pull again
        self._pull_over = asyncio.Event()
        self._credit = 0  # items the open pull request may still deliver
        self._delivered = 0
        self._inbox = ""
        self._next_subject = ""
        self._subscription: Any = None
        self._stopping = False
        self._max_deliver = 0  # the lane consumer's, read at start (0: unlimited)
        self.paused = False  # pool admission: a worker of an unleased pool pulls nothing

    async def start(self) -> None:
        jetstream = self._client.jetstream()
        stream = pool_stream(self._lane.pool)
        redelivery = self._redelivery
        durable = lane_consumer(self._lane.pool, self._lane.machine_profile, self._lane.bundle)
        wanted = lane_consumer_config(durable, self._lane.filter_subject, redelivery.max_deliver)

        async def ensure() -> ConsumerConfig:
            await ensure_work_stream(
                jetstream, self._lane.pool, redelivery.stream_max_age_s, redelivery.stream_replicas
            )
            return await ensure_lane_consumer(jetstream, stream, wanted)

        consumer = await until_answered(f"the lane's stream and consumer {durable}", ensure)
        self._max_deliver = consumer.max_deliver or 0
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = self._client.new_inbox()
        self._subscription = await self._client.subscribe(self._inbox, cb=self._on_delivery)
        self._task = asyncio.create_task(self._loop(), name="sie-pull-loop")
        self._task.add_done_callback(_report_death)
        self._keepalive = asyncio.create_task(self._mark_in_progress(), name="sie-pull-keepalive")
        log.info("pulling %s as %s (consumer %s)", self._lane.filter_subject, self._worker_id, durable)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def _loop(self) -> None:
        """One pull request open at a time, for as many items as there is room for; every item is
        handed to the engine the moment it arrives (the engine batches what arrives together), so
        a lone item waits for no batch to fill. The request's expiry is the adaptive wait (how long
        an empty pull lingers, never how long an item waits). An idle worker keeps pulling at the
        wait's ceiling (15 ms): a lost pull request is noticed within a second, at the cost of a few
        per cent of a core for the worker and NATS while idle (a long-poll was never wired)."""
        wait = self._wait
        # ``_stopping`` as well as the cancel: Python 3.11's wait_for can swallow a cancellation that
        # lands as its future completes, and the loop would then run on.
        while not self._stopping:
            if self.paused:
                await asyncio.sleep(PAUSED_POLL_S)
                continue
            room = self._pace.limit(self._max_in_flight) - len(self._in_flight)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            hole = self._turned_away.wait_before_pull(wait.wait_s)
            if hole > 0:  # an item turned away is offered again: no request of ours may take it
                await asyncio.sleep(hole)
                continue
            self._credit = min(self._budget, room)
            self._pull_over.clear()
            before = self._delivered
            request = {"batch": self._credit, "expires": int(wait.wait_s * 1e9)}
            try:
                await self._client.publish(
                    self._next_subject, json.dumps(request).encode(), reply=self._inbox
                )
                # The server ends the request (408) when it expires; a lost one (a reconnect) is given up.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._pull_over.wait(), wait.wait_s + PULL_GRACE_S)
            except Exception:
                log.exception("pulling work failed; retrying in %.0f ms", wait.wait_s * 1000)
                await asyncio.sleep(wait.wait_s)
                continue
            if self._delivered > before:
                wait.worked()
            else:
                wait.idle()

    async def _on_delivery(self, message: Msg) -> None:
        status = message.headers.get(STATUS_HEADER) if message.headers else None
        if status is not None:  # 408 expired, 404 nothing, 409 conflict; 100 is a heartbeat
            if status != HEARTBEAT_STATUS:
                self._pull_over.set()
            return
        self._delivered += 1
        self._credit -= 1
        if self._credit <= 0:
            self._pull_over.set()
        if self.paused or self._stopping:  # came on a pull opened before: another worker takes it
            await message.nak()
            return
        self._held[id(message)] = (message, time.monotonic())
        self._pace.take()
        task = asyncio.create_task(self._handle(message))
        self._in_flight.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._room.set()

    async def _mark_in_progress(self) -> None:
        """Items held longer than a third of the ack wait are marked in progress, so JetStream gives a
        long batch's items to no other worker; a dead worker's items go elsewhere after ``ACK_WAIT_S``."""
        every = ACK_WAIT_S / 3
        while True:
            await asyncio.sleep(every)
            now = time.monotonic()
            for message, since in list(self._held.values()):
                if now - since >= every:
                    try:
                        await message.in_progress()
                    except Exception:  # a lost connection: the item is redelivered, as it must be
                        log.debug("marking an item in progress failed", exc_info=True)

    async def _handle(self, message: Msg) -> None:
        try:
            await self._settle(message)
        except Exception:  # the per-message edge: JetStream redelivers what was not settled
            log.exception("settling a work item on %s failed", message.subject)
        finally:
            self._held.pop(id(message), None)
            self._pace.release()

    async def _settle(self, message: Msg) -> None:
        try:
            work = decode_work_item(message.data)
        except ContractError as exc:
            log.warning("terminating a malformed work item on %s: %s", message.subject, exc)
            await message.term()  # redelivering it would only fail again
            self._skipped.labels(SkipReason.MALFORMED.value).inc()
            return
        if work.deadline is not None and self._clock() > work.deadline:
            await message.ack()  # nobody waits for it any more: do not spend the device on it
            self._skipped.labels(SkipReason.EXPIRED.value).inc()
            return
        outcome = await self._run(work)
        if outcome.action is QueueAction.RETRY:
            deliveries = message.metadata.num_delivered
            nak = self._redelivery.nak
            wait, growth = nak.first_wait(outcome, CONFIG_WAIT_S), nak.growth(outcome)
            delay = retry_delay(wait, deliveries, self._max_deliver, self._clock(), work.deadline, growth)
            if delay is not None:
                await message.nak(delay=delay)
                if nak.for_another_worker(outcome):
                    self._turned_away.nakked(delay)
                return
            self._skipped.labels(SkipReason.OUT_OF_TIME.value).inc()
        if outcome.result is not None and work.reply_subject.startswith("_INBOX."):
            await self._client.publish(work.reply_subject, encode_message(outcome.result))
        await message.ack()
        if outcome.result is not None and outcome.result.success:
            self._wait.observe(max(0.0, self._clock() - work.timestamp))

    async def _run(self, work: WorkItem) -> Outcome:
        outcome = await self._traced(work)
        if outcome.action is not QueueAction.RETRY:  # told to come back, it took no device time
            self._pace.ran()
        return outcome

    async def _traced(self, work: WorkItem) -> Outcome:
        tracing.REQUEST_ID.set(work.request_id)
        if not tracing.enabled():
            return await self._execute(work)
        parent = tracing.extract(work.traceparent, work.tracestate)
        attributes = {"model": work.model_id, "work_item_id": work.work_item_id, "worker_id": self._worker_id}
        with tracing.span(f"worker.{work.operation}", SpanKind.CONSUMER, parent, **attributes) as span:
            outcome = await self._execute(work)
            span.set_attribute("outcome", outcome.action.value)
            log.debug("work item %s of %s: %s", work.work_item_id, work.model_id, outcome.action.value)
            return outcome

    async def _execute(self, work: WorkItem) -> Outcome:
        try:
            work = await self._fetch_payloads(work)
            request = request_of(work)
            answer = await self._call(work.model_id, request, work.request_id)
        except ModelNotFound as exc:
            outcome = failed(work, exc, self._worker_id)
            if self._config_pending is not None and self._config_pending(work.model_id):
                return Outcome(QueueAction.RETRY, outcome.result, CONFIG_WAIT_S)  # else answered 404
            return outcome
        except Exception as exc:
            return failed(work, exc, self._worker_id)
        return answered(work, answer, self._worker_id)

    async def _fetch_payloads(self, work: WorkItem) -> WorkItem:
        """An item sent by reference (over 1 MiB) read back from the payload store."""
        if work.payload_ref is None and work.query_payload_ref is None:
            return work
        if self._payloads is None:
            raise PayloadMissing(
                "the item is in a payload store, and this worker has none (SIE_PAYLOAD_STORE_URL)"
            )
        if work.payload_ref is not None:
            return replace(work, item=await self._payloads.item(work.payload_ref), payload_ref=None)
        assert work.query_payload_ref is not None
        score = await self._payloads.score(work.query_payload_ref)
        return replace(work, query_item=score.query, score_items=score.items, query_payload_ref=None)

    def _call(self, model: str, request: WireRequest, request_id: str) -> Awaitable[Any]:
        if isinstance(request, EncodeRequest):
            return self._groups.encode(model, request, request_id)
        if isinstance(request, ScoreRequest):
            return self._engine.score(model, request)
        assert isinstance(request, ExtractRequest)
        return self._engine.extract(model, request)

    async def stop(self) -> None:
        """Stop fetching and let the items in flight finish and ack (``DRAIN_S`` at most); what is left
        unacked is redelivered to another worker. The client is its owner's to close."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._in_flight:
            await asyncio.wait(self._in_flight, timeout=DRAIN_S)
        if self._keepalive is not None:
            self._keepalive.cancel()
            await asyncio.gather(self._keepalive, return_exceptions=True)
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()

    def pull_again(self) -> None:
        """After a reconnect the open pull request is gone: open a new one now, not at its expiry."""
        self._pull_over.set()


def _report_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.critical("the pull loop died; this worker takes no more work", exc_info=task.exception())
