"""Dead letters over a real nats-server: an item no worker could run ``max_deliver`` times is written
to ``DEAD_LETTERS`` as its metadata (once, whichever gateway takes the advisory; never the tenant's
text), its request is answered with an ``INTERNAL_ERROR`` result at once, and it leaves the work
stream. The dead-letter stream is bounded and drops its oldest letters first."""

from __future__ import annotations

import asyncio
import contextlib
import time

import nats
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, StorageType, StreamConfig

from sie.gateway.dead_letters import STREAM, DeadLetters
from sie.gateway.metrics import GatewayMetrics
from sie.queue.contract import Lane, decode_dead_letter, lane_consumer, pool_stream
from sie.queue.streams import DEAD_LETTER_MAX_MSG_BYTES, DeadLetterLimits
from sie.settings.gateway import GatewaySettings
from sie.wire.requests import ImageInput, Item
from tests.queue.wire_gateway import Gateway

LANE = Lane("default", "cpu", "default")
LIMITS = GatewaySettings(nats_url="nats://127.0.0.1:1").dead_letter_limits()
DURABLE = lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)


async def poisoning_consumer(js: JetStreamContext, max_deliver: int = 2) -> JetStreamContext.PullSubscription:
    """The lane's consumer with a short ack wait and ``max_deliver``: a worker that fails every item."""
    config = ConsumerConfig(
        durable_name=DURABLE,
        filter_subject=f"sie.work.{LANE.pool}.{LANE.machine_profile}.{LANE.bundle}.*",
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=1,
        max_deliver=max_deliver,
    )
    await js.add_consumer(pool_stream(LANE.pool), config)
    return await js.pull_subscribe_bind(DURABLE, pool_stream(LANE.pool))


async def fail_every_delivery(subscription: JetStreamContext.PullSubscription, times: int) -> None:
    for _ in range(times):  # NAK each delivery, and JetStream gives up after the last
        (message,) = await subscription.fetch(1, timeout=5)
        await message.nak()
    with contextlib.suppress(nats.errors.TimeoutError):  # a worker pulls on; JetStream gives up
        await subscription.fetch(1, timeout=2)


async def test_an_item_past_max_deliver_is_dead_lettered_as_metadata_and_answered(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    other = await nats.connect(nats_url)
    try:
        metrics = [GatewayMetrics(), GatewayMetrics()]
        for connection, registry in zip((client, other), metrics, strict=True):
            await DeadLetters(connection, registry, LIMITS).start()  # two gateways: one takes each advisory
        gateway = Gateway(client, LANE)
        await gateway.start()
        js = client.jetstream()
        subscription = await poisoning_consumer(js)
        before = time.time()
        secret = Item(text="a tenant's private text", images=[ImageInput(data=b"\x89PNG private pixels")])
        sent = await gateway.publish("some/model", item=secret, deadline=before + 30)
        await fail_every_delivery(subscription, 2)
        (result,) = await gateway.wait_for(1, 10)
        assert (result.work_item_id, result.success, result.error_code) == (sent, False, "INTERNAL_ERROR")
        assert "DEAD_LETTERS" in str(result.error)
        await asyncio.sleep(0.2)
        info = await js.stream_info(STREAM)
        assert info.state.messages == 1  # copied once, not once per gateway
        dead = await js.get_msg(STREAM, info.state.last_seq)
        assert dead.subject == "sie.dlq.some__model"
        assert b"private" not in dead.data  # the tenant's payload is not kept
        letter = decode_dead_letter(dead.data)
        assert (letter.work_item_id, letter.request_id, letter.item_index, letter.total_items) == (
            sent,
            sent.removesuffix(".0"),
            0,
            1,
        )
        assert (letter.model_id, letter.pool_name, letter.machine_profile, letter.operation) == (
            "some/model",
            "default",
            "cpu",
            "encode",
        )
        assert (letter.stream, letter.consumer, letter.deliveries, letter.reason) == (
            pool_stream(LANE.pool),
            DURABLE,
            2,
            "max_deliveries",
        )
        assert letter.error == result.error and letter.deadline == before + 30
        assert letter.timestamp is not None and before <= letter.timestamp <= letter.dead_at <= time.time()
        assert (await js.stream_info(pool_stream(LANE.pool))).state.messages == 0
        assert sum(m.dlq_events.labels(pool_stream(LANE.pool), DURABLE)._value.get() for m in metrics) == 1
        assert len([r for r in gateway.results if r.work_item_id == sent]) == 1
    finally:
        await client.close()
        await other.close()


async def test_the_dead_letter_stream_is_bounded_and_keeps_the_newest(nats_url: str) -> None:
    """Past ``SIE_GATEWAY_DLQ_MAX_MSGS`` the oldest letters go (``discard old``), and a stream an older
    gateway made without bounds (here: in memory, as the public gateway makes it) gets them."""
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        await js.add_stream(StreamConfig(name=STREAM, subjects=["sie.dlq.>"], storage=StorageType.MEMORY))
        await DeadLetters(client, GatewayMetrics(), DeadLetterLimits(max_bytes=1 << 20, max_msgs=2)).start()
        config = (await js.stream_info(STREAM)).config
        assert (config.max_msgs, config.max_bytes, config.discard) == (2, 1 << 20, DiscardPolicy.OLD)
        assert (config.max_msg_size, config.storage) == (DEAD_LETTER_MAX_MSG_BYTES, StorageType.MEMORY)
        gateway = Gateway(client, LANE)
        await gateway.start()
        subscription = await poisoning_consumer(js, max_deliver=1)
        sent = [await gateway.publish("some/model", item=Item(text=f"item {i}")) for i in range(3)]
        await fail_every_delivery(subscription, 3)
        await gateway.wait_for(3, 10)
        await asyncio.sleep(0.2)
        info = await js.stream_info(STREAM)
        kept = [
            decode_dead_letter((await js.get_msg(STREAM, seq)).data)
            for seq in (info.state.first_seq, info.state.last_seq)
        ]
        assert info.state.messages == 2 and [k.work_item_id for k in kept] == sent[1:]
    finally:
        await client.close()
