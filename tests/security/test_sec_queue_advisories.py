"""Forged and malformed ``MAX_DELIVERIES`` advisories against a real gateway dead-letter handler on a
real nats-server (audit H4, advisory half; L5 at the dead-letter handler).

A gateway deletes the message an advisory names, so an advisory from anyone who may publish it
(NATS permissions keep ``$JS.EVENT`` to the server itself, ``sie.queue.roles``) used to delete any
stream message: a pool's lease in the KV bucket, a dead letter. Now only a consumer of a pool's work
stream is acted on; everything else changes nothing and is counted. A work item nested too deep to
decode, which a worker of old could not term, still leaves the work stream when JetStream gives up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from sie.gateway.dead_letters import ADVISORY_PREFIX, STREAM, DeadLetters
from sie.gateway.metrics import AdvisoryIgnored, GatewayMetrics
from sie.queue.contract import Lane, decode_dead_letter, lane_consumer, pool_stream, work_subject
from sie.queue.streams import DeadLetterLimits, ensure_lane_consumer, lane_consumer_config
from sie.wire.requests import Item
from tests.queue.wire_gateway import Gateway

LANE = Lane("default", "cpu", "default")
DURABLE = lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)
LIMITS = DeadLetterLimits(max_bytes=1 << 20, max_msgs=100)


def advisory(stream: str, consumer: str, seq: int = 1) -> bytes:
    return json.dumps({"stream": stream, "consumer": consumer, "stream_seq": seq, "deliveries": 20}).encode()


async def test_a_forged_advisory_naming_any_other_stream_changes_nothing(nats_url: str) -> None:
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        metrics = GatewayMetrics()
        await DeadLetters(client, metrics, LIMITS).start()
        pools = await js.create_key_value(bucket="sie_pools")
        await pools.put("tenant-pool", b'{"owner": "tenant-a"}')
        gateway = Gateway(client, LANE)
        await gateway.start()
        await gateway.publish("some/model", item=Item(text="queued, waiting for a worker"))
        await ensure_lane_consumer(
            js, pool_stream(LANE.pool), lane_consumer_config(DURABLE, LANE.filter_subject)
        )
        # A stream named like a pool's but capturing other subjects is no work stream either.
        await js.add_stream(StreamConfig(name="WORK_POOL_fake", subjects=["fake.>"]))
        await js.publish("fake.x", b"an operator's message")
        await ensure_lane_consumer(js, "WORK_POOL_fake", lane_consumer_config("reader", "fake.>"))

        forged: list[tuple[str, bytes]] = [
            ("KV_sie_pools.x", advisory("KV_sie_pools", "x")),
            (f"{STREAM}.x", advisory(STREAM, "x")),
            ("WORK_POOL_fake.reader", advisory("WORK_POOL_fake", "reader")),
            ("WORK_POOL_a.b.c", advisory("WORK_POOL_a.b", "c")),  # a name no stream can have
            (f"{pool_stream(LANE.pool)}.nobody", advisory(pool_stream(LANE.pool), "nobody")),
            # the subject names a real consumer of the work stream, the body the pools' bucket
            (f"{pool_stream(LANE.pool)}.{DURABLE}", advisory("KV_sie_pools", DURABLE)),
            ("x.y", b'{"stream": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
            ("x.y", b'{"stream": "KV_sie_pools", "consumer": "x", "stream_seq": "1"}'),
            ("x.y", b"\xff\xfe not json"),
        ]
        for subject, data in forged:
            await client.publish(f"{ADVISORY_PREFIX}.{subject}", data)
        ignored = metrics.dlq_ignored
        deadline = time.monotonic() + 5
        while (
            time.monotonic() < deadline
            and sum(ignored.labels(r.value)._value.get() for r in AdvisoryIgnored) < 9
        ):
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)

        assert (await pools.get("tenant-pool")).value == b'{"owner": "tenant-a"}'  # the lease stands
        assert (await js.stream_info("WORK_POOL_fake")).state.messages == 1
        assert (await js.stream_info(pool_stream(LANE.pool))).state.messages == 1  # still queued
        assert (await js.stream_info(STREAM)).state.messages == 0  # nothing dead-lettered
        assert gateway.results == []  # and no request answered
        counts = {reason: ignored.labels(reason.value)._value.get() for reason in AdvisoryIgnored}
        assert counts == {
            AdvisoryIgnored.UNREADABLE: 4,
            AdvisoryIgnored.NOT_A_WORK_STREAM: 4,
            AdvisoryIgnored.UNKNOWN_CONSUMER: 1,
        }
        assert metrics.dlq_events.collect()[0].samples == []  # no series from a forged name
    finally:
        await client.close()


async def test_an_undecodable_item_past_max_deliver_still_leaves_the_work_stream(nats_url: str) -> None:
    """L5: the dead-letter handler read the item with a decoder that raised ``RecursionError`` on deep
    nesting, so it never moved or deleted it; now it writes what the advisory says and deletes it."""
    client = await nats.connect(nats_url)
    try:
        js = client.jetstream()
        metrics = GatewayMetrics()
        await DeadLetters(client, metrics, LIMITS).start()
        gateway = Gateway(client, LANE)
        await gateway.start()
        config = ConsumerConfig(
            durable_name=DURABLE,
            filter_subject=LANE.filter_subject,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=1,
            max_deliver=1,
        )
        await js.add_consumer(pool_stream(LANE.pool), config)
        subscription = await js.pull_subscribe_bind(DURABLE, pool_stream(LANE.pool))
        deep = b"\x81\xa7options\x81\xa1k" + b"\x91" * 100_000 + b"\xc0"
        subject = work_subject(LANE.pool, LANE.machine_profile, LANE.bundle, "some/model")
        await js.publish(subject, deep)
        (message,) = await subscription.fetch(1, timeout=5)
        await message.nak()  # a worker that could not term it
        with contextlib.suppress(nats.errors.TimeoutError):
            await subscription.fetch(1, timeout=1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (await js.stream_info(STREAM)).state.messages == 0:
            await asyncio.sleep(0.05)
        letter: Any = decode_dead_letter((await js.get_msg(STREAM, 1)).data)
        assert (letter.stream, letter.consumer, letter.stream_seq, letter.subject) == (
            pool_stream(LANE.pool),
            DURABLE,
            1,
            subject,
        )
        assert letter.work_item_id is None  # nothing of it could be read, and nothing was guessed
        await asyncio.sleep(0.1)
        assert (await js.stream_info(pool_stream(LANE.pool))).state.messages == 0
    finally:
        await client.close()
