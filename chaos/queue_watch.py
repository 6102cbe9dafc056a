"""What the queue did, seen from NATS itself: every delivery of a work item to a worker, every ack,
NAK, in-progress mark and term a worker sent back, and every result a worker published, so a chaos
run can check its invariants from outside the processes: nothing answered twice, no item delivered
more often than its redeliveries allow, which worker ran how many items and how many it held at once.

A plain NATS client subscribed to ``_INBOX.>`` (pull deliveries and results travel on inboxes) and
``$JS.ACK.>`` (a worker's answer to a delivery is published to the delivery's reply subject). It needs a
NATS that lets it read those subjects (the tests' open server; on a server with the roles of
``sie.queue.roles`` an account that may subscribe to them).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from sie.queue.contract import ContractError, decode_work_item, decode_work_result

ACK_PREFIX: Final = "$JS.ACK."


class Settle(StrEnum):
    ACK = "ack"
    NAK = "nak"
    IN_PROGRESS = "in_progress"
    TERM = "term"


@dataclass(frozen=True)
class Delivery:
    """One message's ``num_delivered``-th delivery (to some worker's pull: NATS names the message's
    own subject, not the inbox it went to)."""

    stream_seq: int
    delivered: int
    work_item_id: str
    at: float


@dataclass(frozen=True)
class Answer:
    work_item_id: str
    worker_id: str
    success: bool
    at: float


@dataclass
class Summary:
    """The invariants and the shares, over everything watched."""

    items: int  # distinct work items delivered
    answers_per_worker: dict[str, int]
    twice_answered: list[str]  # work items with more than one result
    max_delivered: int  # the most deliveries any one item had
    redelivered: int  # items delivered more than once
    max_held: dict[str, int]  # per worker: the most items delivered to it and not yet settled
    naks: int
    in_progress_marks: int

    def share(self, worker: str) -> float:
        total = sum(self.answers_per_worker.values())
        return self.answers_per_worker.get(worker, 0) / total if total else 0.0


@dataclass
class QueueWatch:
    """Subscribe with ``start``; read ``summary`` whenever (the counts so far)."""

    url: str
    deliveries: list[Delivery] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    settles: list[tuple[int, int, Settle, float]] = field(default_factory=list)  # seq, delivered, how, at
    _client: Client | None = None

    async def start(self) -> None:
        self._client = await nats.connect(self.url, name="sie-chaos-queue-watch")
        await self._client.subscribe("_INBOX.>", cb=self._on_inbox)
        await self._client.subscribe(f"{ACK_PREFIX}>", cb=self._on_ack)
        await self._client.flush()

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.flush()
            await self._client.close()

    async def _on_inbox(self, message: Msg) -> None:
        now = time.monotonic()
        if message.reply.startswith(ACK_PREFIX):  # a pull delivery to a worker
            try:
                item = decode_work_item(message.data)
            except ContractError:
                return
            stream_seq, delivered = _sequence(message.reply)
            self.deliveries.append(Delivery(stream_seq, delivered, item.work_item_id, now))
            return
        if not message.data:  # a pull request's status (408, 404, 409, 100)
            return
        try:
            result = decode_work_result(message.data)
        except ContractError:
            return
        self.answers.append(Answer(result.work_item_id, result.worker_id or "", result.success, now))

    async def _on_ack(self, message: Msg) -> None:
        body = message.data
        how = (
            Settle.NAK
            if body.startswith(b"-NAK")
            else Settle.IN_PROGRESS
            if body.startswith(b"+WPI")
            else Settle.TERM
            if body.startswith(b"+TERM")
            else Settle.ACK
        )
        stream_seq, delivered = _sequence(message.subject)
        self.settles.append((stream_seq, delivered, how, time.monotonic()))

    def summary(self) -> Summary:
        answers = Counter(a.worker_id for a in self.answers)
        per_item = Counter(a.work_item_id for a in self.answers)
        delivered: dict[int, int] = defaultdict(int)
        for d in self.deliveries:
            delivered[d.stream_seq] = max(delivered[d.stream_seq], d.delivered)
        return Summary(
            items=len({d.work_item_id for d in self.deliveries}),
            answers_per_worker=dict(answers),
            twice_answered=sorted(item for item, n in per_item.items() if n > 1),
            max_delivered=max(delivered.values(), default=0),
            redelivered=sum(n > 1 for n in delivered.values()),
            max_held=self._max_held(),
            naks=sum(how is Settle.NAK for _, _, how, _ in self.settles),
            in_progress_marks=sum(how is Settle.IN_PROGRESS for _, _, how, _ in self.settles),
        )

    def _max_held(self) -> dict[str, int]:
        """Per worker: the most deliveries it had at once that it had not yet acked, NAKed or termed.
        A delivery is the answering worker's when it was the item's last (NATS does not say which
        pull inbox a message went to); an earlier delivery of a redelivered item counts as ``?``."""
        last: dict[str, int] = {}
        for d in self.deliveries:
            last[d.work_item_id] = max(last.get(d.work_item_id, 0), d.delivered)
        answered_by = {a.work_item_id: a.worker_id for a in self.answers}
        owner: dict[tuple[int, int], str] = {}
        events: list[tuple[float, str, int]] = []
        for d in self.deliveries:
            final = d.delivered == last[d.work_item_id]
            worker = answered_by.get(d.work_item_id, "?") if final else "?"
            owner[(d.stream_seq, d.delivered)] = worker
            events.append((d.at, worker, 1))
        for seq, count, how, at in self.settles:
            settled = owner.get((seq, count))
            if settled is not None and how is not Settle.IN_PROGRESS:
                events.append((at, settled, -1))
        held: Counter[str] = Counter()
        most: Counter[str] = Counter()
        for _, name, step in sorted(events):
            held[name] += step
            most[name] = max(most[name], held[name])
        return dict(most)


def _sequence(ack_subject: str) -> tuple[int, int]:
    """The stream sequence and delivery count an ack subject names (JetStream's v1 layout,
    ``$JS.ACK.stream.consumer.delivered.sseq.cseq.ts.pending``, or v2's, which adds a domain and an
    account hash before the stream and a token after the pending count)."""
    tokens = ack_subject.split(".")
    first = 2 if len(tokens) == 9 else 4
    return int(tokens[first + 3]), int(tokens[first + 2])
