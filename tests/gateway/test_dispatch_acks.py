"""The dispatcher's JetStream acks, counted per request on one subscription (``dispatch.Acks``), over
a real nats-server: a subject no stream holds fails at once as JetStream's own publish fails, every
item stored is observed once in the publish histogram, the results may come before the acks, and a
request past the window still stores each item exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from sie.gateway.dispatch import Dispatcher
from sie.gateway.errors import PublishFailed
from sie.gateway.metrics import GatewayMetrics
from sie.queue.contract import (
    WorkResult,
    decode_work_item,
    encode_message,
    pool_stream,
)
from sie.queue.streams import ensure_work_stream
from tests.queue.dispatching import POOL, SUBJECT, requested


@pytest.fixture
async def client(nats_url: str) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_url)
    yield connection
    await connection.close()


def observed(metrics: GatewayMetrics) -> float:
    [family] = metrics.publish_seconds.collect()
    return float(sum(s.value for s in family.samples if s.name.endswith("_count")))


async def test_a_subject_no_stream_holds_fails_at_once(client: Client) -> None:
    dispatcher = Dispatcher(client, GatewayMetrics(), publish_concurrency=8)
    await dispatcher.start()
    request_id = dispatcher.new_request_id()
    started = time.monotonic()
    with pytest.raises(PublishFailed, match="no response from stream"):
        await dispatcher.run(request_id, SUBJECT, requested(dispatcher, request_id, 3), 10)
    assert time.monotonic() - started < 2  # the no-responders reply, not the request's timeout


async def test_results_before_acks_and_a_request_past_the_window(client: Client) -> None:
    """A worker answers each item as it is delivered; 40 items through a window of 4: every item
    stored once, every result taken, one publish time observed per request."""
    jetstream = client.jetstream()
    await ensure_work_stream(jetstream, POOL)
    metrics = GatewayMetrics()
    dispatcher = Dispatcher(client, metrics, publish_concurrency=4)
    await dispatcher.start()
    seen: list[str] = []

    async def worker(message: Msg) -> None:
        work = decode_work_item(message.data)
        seen.append(work.work_item_id)
        result = WorkResult(work.work_item_id, work.request_id, work.item_index, True, result_msgpack=b"\x90")
        await client.publish(work.reply_subject, encode_message(result))

    await client.subscribe(SUBJECT, cb=worker)  # a plain subscriber: sees each publish as it goes out
    for count in (1, 40):
        request_id = dispatcher.new_request_id()
        results = await asyncio.wait_for(
            dispatcher.run(request_id, SUBJECT, requested(dispatcher, request_id, count), 10), 10
        )
        assert [r.item_index for r in results if r is not None] == list(range(count))
    await asyncio.sleep(0.2)  # acks that came after the results
    assert len(seen) == len(set(seen)) == 41
    assert (await jetstream.stream_info(pool_stream(POOL))).state.messages == 41
    assert observed(metrics) == 2
