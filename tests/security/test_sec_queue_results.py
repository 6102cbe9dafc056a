"""The gateway's side of the queue against a hostile or failing NATS peer, over a real nats-server
(audit L6 and the publishing half of H2).

- A result is taken only when its inbox subject's request token, its ``request_id`` and its
  ``work_item_id`` (``{request_id}.{item_index}``) agree: any peer that can publish into ``_INBOX.>``
  could otherwise answer another tenant's in-flight request first (the first result per slot wins).
  What is dropped is counted in ``sie_gateway_queue_inbox_skips_total{reason}``, a fixed label set.
- A request's items are published through a window of ``SIE_GATEWAY_PUBLISH_CONCURRENCY`` at once,
  and the first refused publish stops the rest: a full stream costs one window of attempts, not
  one publish per item.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from sie.gateway.dispatch import Dispatcher
from sie.gateway.errors import PublishFailed
from sie.gateway.metrics import GatewayMetrics, InboxSkip
from sie.queue.contract import (
    WorkResult,
    decode_work_item,
    encode_message,
    pool_stream,
    pool_stream_subjects,
)
from sie.queue.streams import ensure_work_stream
from tests.queue.dispatching import POOL, SUBJECT, requested


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_url)
    yield connection
    await connection.close()


def skips(metrics: GatewayMetrics, reason: InboxSkip) -> float:
    value: float = metrics.inbox_skips.labels(reason.value)._value.get()
    return value


def answer(request_id: str, index: int, worker: str, *, work_item_id: str | None = None) -> bytes:
    work_item = work_item_id if work_item_id is not None else f"{request_id}.{index}"
    return encode_message(
        WorkResult(work_item, request_id, index, True, result_msgpack=b"\x90", worker_id=worker)
    )


async def test_a_result_whose_subject_and_ids_disagree_is_dropped_and_counted(client: Client) -> None:
    metrics = GatewayMetrics()
    dispatcher = Dispatcher(client, metrics, publish_concurrency=8)
    await dispatcher.start()
    await ensure_work_stream(client.jetstream(), POOL)
    worker = await client.jetstream().pull_subscribe(SUBJECT, durable="honest", stream=pool_stream(POOL))
    victim, other = dispatcher.new_request_id(), dispatcher.new_request_id()
    running = asyncio.create_task(dispatcher.run(victim, SUBJECT, requested(dispatcher, victim, 2), 10))
    delivered = await worker.fetch(2, timeout=5)
    # Before any worker answers, a peer on NATS answers first, three ways:
    forged = [
        (dispatcher.reply_subject(other), answer(victim, 0, "forger")),  # another request's inbox
        (dispatcher.reply_subject(victim), answer(victim, 1, "forger", work_item_id=f"{victim}.0")),
        (dispatcher.reply_subject(victim), answer(other, 1, "forger")),  # another request's id
        (f"{dispatcher.reply_subject(victim)}.extra", answer(victim, 0, "forger")),
    ]
    for subject, data in forged:
        await client.publish(subject, data)
    await client.publish(dispatcher.reply_subject(victim), b"\x91" * 100_000 + b"\xc0")  # undecodable
    await client.flush()
    await asyncio.sleep(0.2)
    for message in delivered:  # then the worker that ran them
        work = decode_work_item(message.data)
        await client.publish(work.reply_subject, answer(work.request_id, work.item_index, "honest"))
        await message.ack()
    results = await asyncio.wait_for(running, 10)
    assert [(r.work_item_id, r.worker_id) for r in results if r is not None] == [
        (f"{victim}.0", "honest"),
        (f"{victim}.1", "honest"),
    ]
    assert skips(metrics, InboxSkip.MISMATCHED) == len(forged)
    assert skips(metrics, InboxSkip.UNDECODABLE) == 1
    await client.publish(dispatcher.reply_subject(victim), answer(victim, 0, "honest"))  # its request is over
    await client.flush()
    await asyncio.sleep(0.1)
    assert skips(metrics, InboxSkip.LATE) == 1
    labels = {sample.labels["reason"] for sample in metrics.inbox_skips.collect()[0].samples}
    assert labels == {reason.value for reason in InboxSkip}  # the only series there will ever be


async def test_publishing_stops_at_the_first_refusal_one_window_in(client: Client) -> None:
    """A stream that holds 5 items, a request of 200: the gateway tries at most 5 + the window
    (every attempt reaches the subject, which a plain subscriber sees), then answers QUEUE_FULL."""
    jetstream = client.jetstream()
    await jetstream.add_stream(
        StreamConfig(
            name=pool_stream(POOL),
            subjects=pool_stream_subjects(POOL),
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            max_msgs=5,
            discard=DiscardPolicy.NEW,
        )
    )
    attempts: list[bytes] = []

    async def seen(message: nats.aio.msg.Msg) -> None:
        attempts.append(message.data)

    await client.subscribe(SUBJECT, cb=seen)
    window = 4
    dispatcher = Dispatcher(client, GatewayMetrics(), publish_concurrency=window)
    await dispatcher.start()
    request_id = dispatcher.new_request_id()
    with pytest.raises(PublishFailed, match="maximum messages exceeded"):
        await dispatcher.run(request_id, SUBJECT, requested(dispatcher, request_id, 200), 10)
    await client.flush()
    await asyncio.sleep(0.2)
    assert (await jetstream.stream_info(pool_stream(POOL))).state.messages == 5
    assert 5 < len(attempts) <= 5 + window


async def test_a_full_request_is_published_whole_through_the_window(client: Client) -> None:
    jetstream = client.jetstream()
    await ensure_work_stream(jetstream, POOL)
    dispatcher = Dispatcher(client, GatewayMetrics(), publish_concurrency=3)
    await dispatcher.start()
    request_id = dispatcher.new_request_id()
    items = requested(dispatcher, request_id, 50)
    results = await dispatcher.run(request_id, SUBJECT, items, 0.5)  # nobody answers: all time out
    assert results == [None] * 50
    stored = await jetstream.stream_info(pool_stream(POOL))
    assert stored.state.messages == 50


async def test_a_request_that_gave_up_publishes_no_more(client: Client) -> None:
    """A request that times out while its items are still going out (a slow stream, a huge request)
    stops publishing them: nobody would read their answers."""
    jetstream = client.jetstream()
    await ensure_work_stream(jetstream, POOL)
    dispatcher = Dispatcher(client, GatewayMetrics(), publish_concurrency=1)
    await dispatcher.start()
    request_id = dispatcher.new_request_id()
    results = await dispatcher.run(request_id, SUBJECT, requested(dispatcher, request_id, 2000), 0.05)
    assert results == [None] * 2000
    before = (await jetstream.stream_info(pool_stream(POOL))).state.messages
    await asyncio.sleep(0.5)
    after = (await jetstream.stream_info(pool_stream(POOL))).state.messages
    assert before <= after <= before + 1 < 2000  # at most the one publish in flight lands late
