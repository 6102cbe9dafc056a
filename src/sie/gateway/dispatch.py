"""Work items out on JetStream, their results back on one NATS core inbox, gathered per request.

Each gateway process has a random ``router_id`` and one subscription on ``_INBOX.{router_id}.>``; a
request registers a collector under its id before anything is published, the inbox fills the
collector's slots by ``item_index``, and the request's task awaits the last one (or its timeout).
JetStream holds the items durably until a worker acks them, so a worker that dies mid-batch only delays
its items (redelivered to another worker) and the first result for a slot is the one kept: nothing is
answered twice.

Because the first result wins, a result is taken only when the three places that name its request
agree: the inbox subject's last token, the body's ``request_id`` and its ``work_item_id``
(``{request_id}.{item_index}``); otherwise any peer that can publish into ``_INBOX.>`` could answer
another tenant's request before its worker does. Whatever the inbox drops is counted by reason
(``sie_gateway_queue_inbox_skips_total``).

A request's items go out through a window of ``publish_concurrency`` publishes not yet acknowledged
by JetStream, so a 512-item request holds a bounded number of publishes and encoded messages, and
the first refusal (a full stream) stops the rest instead of every item trying. The acks are counted
per request on one subscription (``Acks``), not awaited one request future per item.

Before publishing, a request's pool stream is checked against ``max_stream_pending``
(``SIE_GATEWAY_MAX_STREAM_PENDING``): its depth is read from JetStream at most every
``STREAM_DEPTH_TTL_S`` (one read shared by the requests that wait for it), and a deeper stream is
refused 503 ``QUEUE_FULL`` with ``Retry-After: 5``, as the public gateway refuses it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Final, cast

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError
from prometheus_client import Histogram

from sie.gateway.errors import PublishFailed, QueueUnreachable, StreamBacklog
from sie.gateway.metrics import GatewayMetrics, InboxSkip
from sie.queue.contract import (
    STREAM_MAX_AGE_S,
    ContractError,
    WorkItem,
    WorkResult,
    decode_work_result,
    encode_message,
    pool_stream,
)
from sie.queue.streams import ensure_work_stream

log = logging.getLogger(__name__)

STREAM_DEPTH_TTL_S: Final = 0.05  # the public gateway's monitor period
DEFAULT_MAX_STREAM_PENDING: Final = 50_000
PUBLISH_ACK_TIMEOUT_S: Final = 5.0  # JetStreamContext.publish's default: no ack for this long fails
NO_RESPONDERS_STATUS: Final = "503"
JS_API: Final = "$JS.API"  # the JetStream API prefix of ``client.jetstream()``, no domain


@dataclass
class Collector:
    slots: list[WorkResult | None]
    done: asyncio.Future[None]
    missing: int = field(init=False)
    published_at: float = 0.0

    def __post_init__(self) -> None:
        self.missing = len(self.slots)

    def put(self, result: WorkResult) -> InboxSkip | None:
        """Fill the result's slot; why it was not taken otherwise."""
        index = result.item_index
        if not 0 <= index < len(self.slots):
            return InboxSkip.MISMATCHED  # an index this request never published
        if self.slots[index] is not None:
            return InboxSkip.DUPLICATE  # a redelivered item's second answer: the first one stands
        self.slots[index] = result
        self.missing -= 1
        if self.missing == 0 and not self.done.done():
            self.done.set_result(None)
        return None


class Dispatcher:
    def __init__(
        self,
        client: Client,
        metrics: GatewayMetrics,
        publish_concurrency: int,
        stream_max_age_s: float = STREAM_MAX_AGE_S,
        max_stream_pending: int = DEFAULT_MAX_STREAM_PENDING,
        stream_replicas: int = 1,
    ) -> None:
        if publish_concurrency < 1:
            raise ValueError(f"publish_concurrency must be at least 1, not {publish_concurrency}")
        self.client = client
        self._metrics = metrics
        self._window = publish_concurrency
        self._stream_max_age_s = stream_max_age_s
        self._max_stream_pending = max_stream_pending
        self._stream_replicas = stream_replicas
        self.router_id = uuid.uuid4().hex
        self._jetstream: JetStreamContext = client.jetstream()
        self._collectors: dict[str, Collector] = {}
        self._streams: set[str] = set()
        self._depths: dict[str, tuple[float, int]] = {}  # pool -> (when read, items in its stream)
        self._reading: dict[str, asyncio.Future[int]] = {}
        self._acks = Acks(client)

    async def start(self) -> None:
        await self.client.subscribe(f"_INBOX.{self.router_id}.>", cb=self._on_inbox)
        await self._acks.start()

    def new_request_id(self) -> str:
        return uuid.uuid4().hex

    def reply_subject(self, request_id: str) -> str:
        return f"_INBOX.{self.router_id}.{request_id}"

    async def _on_inbox(self, message: Msg) -> None:
        skipped = self._take(message)
        if skipped is not None:
            self._metrics.inbox_skips.labels(skipped.value).inc()

    def _take(self, message: Msg) -> InboxSkip | None:
        try:
            result = decode_work_result(message.data)
        except ContractError as exc:
            log.warning("dropping an undecodable result on %s: %s", message.subject, exc)
            return InboxSkip.UNDECODABLE
        inbox, _, request_id = message.subject.rpartition(".")
        if (
            inbox != f"_INBOX.{self.router_id}"
            or result.request_id != request_id
            or result.work_item_id != f"{request_id}.{result.item_index}"
        ):
            log.warning(
                "dropping a result on %s that names request %.64r, item %.80r",
                message.subject,
                result.request_id,
                result.work_item_id,
            )
            return InboxSkip.MISMATCHED
        collector = self._collectors.get(request_id)
        if collector is None:
            return InboxSkip.LATE  # its request was answered, or timed out
        return collector.put(result)

    async def ensure_stream(self, pool: str) -> None:
        """The pool's stream, checked once per connection. JetStream may not answer for a few seconds
        (a NATS node died and its streams elect new leaders): that is a 503 the client retries, not a
        500."""
        if pool in self._streams:
            return
        try:
            await ensure_work_stream(self._jetstream, pool, self._stream_max_age_s, self._stream_replicas)
        except nats.errors.Error as exc:
            raise QueueUnreachable(
                f"The queue (NATS JetStream) did not answer for pool '{pool}' ({type(exc).__name__}); retry shortly"
            ) from exc
        self._streams.add(pool)

    def forget_streams(self) -> None:
        """After a reconnect the server may be a new one: streams are checked again."""
        self._streams.clear()
        self._depths.clear()

    async def check_backlog(self, pool: str) -> None:
        """``StreamBacklog`` when the pool's stream holds more than ``max_stream_pending`` items."""
        depth = await self._depth(pool)
        if depth > self._max_stream_pending:
            raise StreamBacklog(pool, depth, self._max_stream_pending)

    async def _depth(self, pool: str) -> int:
        read = self._depths.get(pool)
        if read is not None and time.monotonic() - read[0] < STREAM_DEPTH_TTL_S:
            return read[1]
        reading = self._reading.get(pool)
        if reading is None:
            reading = self._reading[pool] = asyncio.ensure_future(self._stream_messages(pool))
            reading.add_done_callback(lambda _: self._reading.pop(pool, None))
        try:
            depth = await asyncio.shield(reading)
        except NotFoundError:
            return 0  # created by this request's ensure_stream, or by the first worker
        except Exception as exc:  # no answer: the publish that follows says what is wrong
            log.debug("reading the depth of pool %s failed: %r", pool, exc)
            return 0
        self._depths[pool] = (time.monotonic(), depth)
        return depth

    async def _stream_messages(self, pool: str) -> int:
        """The messages in the pool's stream: ``JetStreamManager.stream_info``'s request, with only
        ``state.messages`` read from its reply (turning the whole reply into a ``StreamInfo``, its
        config and dates, cost as much as the request itself, up to 20 times a second under load)."""
        reply = await self.client.request(f"{JS_API}.STREAM.INFO.{pool_stream(pool)}", b"", timeout=5.0)
        info = json.loads(reply.data)
        if "error" in info:
            APIError.from_error(info["error"])  # raises its class: NotFoundError for no such stream
            raise APIError(description=str(info["error"]))
        return int(info["state"]["messages"])

    async def run(
        self, request_id: str, subject: str, items: list[WorkItem], timeout_s: float
    ) -> list[WorkResult | None]:
        """Publish every item, await every result; on timeout the slots still empty are None.

        The first window of items is published here, inline (a publish only queues the message for
        the client's flusher); a larger request's rest goes out from a task as acks make room. The
        acks are counted beside the results, not awaited before them (a result may come back before
        JetStream's ack does): a refusal, or no ack for ``PUBLISH_ACK_TIMEOUT_S``, ends the request
        with ``PublishFailed``. One future per request (its collector's) is all this awaits."""
        loop = asyncio.get_running_loop()
        collector = Collector([None] * len(items), loop.create_future())
        self._collectors[request_id] = collector
        collector.published_at = time.monotonic()
        metrics = self._metrics
        histogram = metrics.labelled(metrics.publish_seconds, items[0].operation) if items else None
        tally = self._acks.expect(len(items), collector, histogram)
        timer = loop.call_later(timeout_s, _time_up, collector.done)
        rest: asyncio.Future[None] | None = None
        try:
            first = min(self._window, len(items))
            try:
                for item in items[:first]:
                    await self.client.publish(subject, encode_message(item), reply=tally.subject)
                    tally.sent += 1
            except Exception as exc:
                raise PublishFailed(str(exc) or type(exc).__name__) from exc
            tally.arm()
            if first < len(items):
                rest = asyncio.ensure_future(self._publish_rest(subject, items[first:], tally))
                rest.add_done_callback(tally.publishing_failed)
            await collector.done  # None: every result in, or the time is up; else PublishFailed
            return collector.slots
        finally:
            timer.cancel()
            del self._collectors[request_id]
            complete = collector.missing == 0
            tally.stop = not complete  # timed out, refused or cancelled: what is not out stays so
            if rest is not None and not rest.done() and not complete:
                rest.cancel()
            self._acks.finished(tally, late=complete)

    async def _publish_rest(self, subject: str, items: list[WorkItem], tally: AckTally) -> None:
        """A large request's items past the first window, each once an ack leaves room for it (at
        most ``publish_concurrency`` unacknowledged), each encoded only when its turn comes, until
        the request stops (``tally.stop``: answered, refused, timed out, cancelled). ``stop`` as well
        as the cancel: Python 3.11's ``wait_for`` can swallow a cancellation that lands as an ack
        arrives, and the window would then publish on."""
        for item in items:
            if tally.sent - tally.acked >= self._window:
                await tally.room(self._window)
            if tally.stop or tally.failure is not None:
                return
            await self.client.publish(subject, encode_message(item), reply=tally.subject)
            tally.sent += 1


def _time_up(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class AckTally:
    """One request's JetStream acks, counted as they arrive on its reply subject. The first refusal
    (an error ack, or no stream answering) or ``PUBLISH_ACK_TIMEOUT_S`` without an ack while some
    are owed fails the request's collector with ``PublishFailed``; all acked, the publish time is
    observed.

    Each item is the same JetStream publish as ``JetStreamContext.publish`` sends (a core PUB with a
    reply subject for the ack), but its ack is counted here instead of each item holding a request
    future, a ``wait_for`` and a parsed ``PubAck``: that per-item round of awaits was a third of the
    gateway's CPU at 32-item requests."""

    __slots__ = (
        "_acks",
        "_collector",
        "_histogram",
        "_seen",
        "_timer",
        "_waiter",
        "acked",
        "expected",
        "failure",
        "late",
        "sent",
        "stop",
        "subject",
    )

    def __init__(
        self, acks: Acks, subject: str, expected: int, collector: Collector, histogram: Histogram | None
    ) -> None:
        self._acks = acks
        self.subject = subject
        self.expected = expected
        self._collector = collector
        self._histogram = histogram
        self.sent = 0
        self.acked = 0
        self.failure: BaseException | None = None
        self.stop = False
        self.late = False  # the request is over with every result in; the acks still count
        self._seen = 0  # acks at the last look of the timer
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None

    def take(self, message: Msg) -> None:
        if self.failure is not None:
            return
        refused = _refusal(message)
        if refused is not None:
            self._fail(refused)
            return
        self.acked += 1
        if self.acked >= self.expected:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._histogram is not None:
                self._histogram.observe(time.monotonic() - self._collector.published_at)
            self._acks.forget(self)
        self._wake()

    def arm(self) -> None:
        """Watch for acks that stop coming (a stalled or unreachable JetStream)."""
        if self._timer is None and self.acked < self.expected:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(PUBLISH_ACK_TIMEOUT_S, self._look)

    def _look(self) -> None:
        self._timer = None
        if self.failure is not None or self.acked >= self.expected or self.stop:
            return
        if self.acked == self._seen and self.acked < self.sent:
            self._fail(nats.errors.TimeoutError())
            return
        self._seen = self.acked
        self.arm()

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        self._acks.forget(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.late:
            log.warning("a JetStream ack failed after its results arrived: %s", error)
        elif not self._collector.done.done():
            self._collector.done.set_exception(PublishFailed(str(error) or type(error).__name__))
        self._wake()

    def publishing_failed(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None and self.failure is None:
            self._fail(cast(BaseException, done.exception()))

    async def room(self, window: int) -> None:
        """Until fewer than ``window`` published items await their ack, or the request stops."""
        while self.sent - self.acked >= window and self.failure is None and not self.stop:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()


class Acks:
    """The acks of every request's publishes on one subscription (``_INBOX.{random}.*``), each
    request's tally under its own last token."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._prefix = f"_INBOX.{uuid.uuid4().hex}."
        self._tallies: dict[str, AckTally] = {}
        self._next = 0

    async def start(self) -> None:
        await self._client.subscribe(f"{self._prefix}*", cb=self._on_ack)

    def expect(self, count: int, collector: Collector, histogram: Histogram | None) -> AckTally:
        self._next += 1
        token = str(self._next)
        tally = self._tallies[token] = AckTally(self, self._prefix + token, count, collector, histogram)
        return tally

    def forget(self, tally: AckTally) -> None:
        self._tallies.pop(tally.subject[len(self._prefix) :], None)

    def finished(self, tally: AckTally, *, late: bool) -> None:
        """Its request is over: with every result in (``late``), the acks still owed are counted (a
        refusal is logged); otherwise nothing more is read for it."""
        if late and tally.failure is None and tally.acked < tally.expected:
            tally.late = True
            return
        self.forget(tally)
        tally.close()

    async def _on_ack(self, message: Msg) -> None:
        tally = self._tallies.get(message.subject[len(self._prefix) :])
        if tally is not None:  # else: its request finished (answered, refused or timed out)
            tally.take(message)


def _refusal(message: Msg) -> BaseException | None:
    """None for a JetStream ack that stored the message; otherwise what ``JetStreamContext.publish``
    raises for the reply: no stream answered, or JetStream's error."""
    data = message.data
    if data.startswith(b'{"stream"'):  # a PubAck; an error reply starts with {"error"
        return None
    if not data and message.headers and message.headers.get(Header.STATUS) == NO_RESPONDERS_STATUS:
        return NoStreamResponseError()
    try:
        reply = json.loads(data)
    except ValueError:
        return APIError(description=f"unreadable JetStream ack: {data[:80]!r}")
    if isinstance(reply, dict) and "error" in reply:
        try:
            APIError.from_error(reply["error"])  # raises the error's class, as JetStream's publish does
        except APIError as refused:
            return refused
        return APIError(description=f"unexpected JetStream ack: {data[:80]!r}")
    if isinstance(reply, dict) and "stream" in reply:
        return None
    return APIError(description=f"unexpected JetStream ack: {data[:80]!r}")
