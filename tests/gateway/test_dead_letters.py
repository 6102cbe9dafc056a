"""Dead letters over a real nats-server: an item no worker could run ``max_deliver`` times is copied
to ``DEAD_LETTERS`` (once, whichever gateway takes the advisory), its request is answered with an
``INTERNAL_ERROR`` result at once, and it leaves the work stream."""

from __future__ import annotations

import asyncio
import contextlib

import nats
from nats.js.api import AckPolicy, ConsumerConfig

from sie.gateway.dead_letters import STREAM, DeadLetters
from sie.gateway.metrics import GatewayMetrics
from sie.queue.contract import Lane, decode_work_item, lane_consumer, pool_stream
from sie.wire.requests import Item
from tests.queue.wire_gateway import Gateway

LANE = Lane("default", "cpu", "default")


async def test_an_item_past_max_deliver_is_dead_lettered_and_answered(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    other = await nats.connect(nats_url)
    try:
        metrics = [GatewayMetrics(), GatewayMetrics()]
        for connection, registry in zip((client, other), metrics, strict=True):
            await DeadLetters(connection, registry).start()  # two gateways: one takes each advisory
        gateway = Gateway(client, LANE)
        await gateway.start()
        js = client.jetstream()
        durable = lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)
        config = ConsumerConfig(
            durable_name=durable,
            filter_subject=f"sie.work.{LANE.pool}.{LANE.machine_profile}.{LANE.bundle}.*",
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=1,
            max_deliver=2,
        )
        await js.add_consumer(pool_stream(LANE.pool), config)
        subscription = await js.pull_subscribe_bind(durable, pool_stream(LANE.pool))
        sent = await gateway.publish("some/model", item=Item(text="poison"))
        for _ in range(2):  # a worker that fails it every time: NAK, NAK, and JetStream gives up
            (message,) = await subscription.fetch(1, timeout=5)
            assert decode_work_item(message.data).work_item_id == sent
            await message.nak()
        with contextlib.suppress(nats.errors.TimeoutError):  # a worker pulls on; JetStream gives up
            await subscription.fetch(1, timeout=2)
        (result,) = await gateway.wait_for(1, 10)
        assert (result.work_item_id, result.success, result.error_code) == (sent, False, "INTERNAL_ERROR")
        assert "DEAD_LETTERS" in str(result.error)
        await asyncio.sleep(0.2)
        info = await js.stream_info(STREAM)
        assert info.state.messages == 1  # copied once, not once per gateway
        dead = await js.get_msg(STREAM, info.state.last_seq)
        assert decode_work_item(dead.data).work_item_id == sent
        assert (
            dead.subject == "sie.dlq.some__model" and dead.headers and dead.headers["Sie-Deliveries"] == "2"
        )
        assert (await js.stream_info(pool_stream(LANE.pool))).state.messages == 0
        assert sum(m.dlq_events.labels(pool_stream(LANE.pool), durable)._value.get() for m in metrics) == 1
        assert len([r for r in gateway.results if r.work_item_id == sent]) == 1
    finally:
        await client.close()
        await other.close()
