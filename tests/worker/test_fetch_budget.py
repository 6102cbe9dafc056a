"""``SIE_NATS_FETCH_BUDGET`` (the public chart's ``queueRouting.natsFetchBudget``): the most work items
one pull asks JetStream for. Observed on the wire: a second NATS client listens on the consumer's
``MSG.NEXT`` subject, where every pull request the worker sends carries its ``batch``. The worker is
the one ``sie-server`` composes from its settings (``server.app.queue_worker``), over a real
nats-server and a real engine, with twelve items already waiting, its pace off (``SIE_NATS_HOLD_S``
0: until it knows its pace a worker holds 16)."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from sie.engine.engine import Engine
from sie.observability.metrics import Metrics
from sie.queue.contract import lane_consumer, lane_of, pool_stream
from sie.server.app import queue_worker, worker_identity
from sie.server.lifecycle import Lifecycle
from sie.settings.server import Settings
from sie.wire.requests import Item
from tests.queue.wire_gateway import Gateway

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ITEMS = 12


@pytest.mark.parametrize(("budget", "largest"), [(None, 64), ("2", 2)])
async def test_one_pull_asks_for_at_most_the_budget(
    nats_url: str, engine: Engine, monkeypatch: pytest.MonkeyPatch, budget: str | None, largest: int
) -> None:
    monkeypatch.setenv("SIE_NATS_URL", nats_url)
    monkeypatch.setenv("SIE_POOL", "budget")
    monkeypatch.setenv("SIE_WORKER_METRICS_PORT", "0")
    monkeypatch.setenv("SIE_NATS_HOLD_S", "0")  # the pace off: a new worker would hold only 16
    if budget is not None:
        monkeypatch.setenv("SIE_NATS_FETCH_BUDGET", budget)
    settings = Settings()
    lane = lane_of(settings.pool, settings.profile(), settings.bundle)
    durable = lane_consumer(lane.pool, lane.machine_profile, lane.bundle)
    client = await nats.connect(nats_url)
    asked: list[int] = []

    async def pull_request(message: nats.aio.msg.Msg) -> None:
        asked.append(json.loads(message.data)["batch"])

    await client.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{pool_stream(lane.pool)}.{durable}", cb=pull_request)
    gateway = Gateway(client, lane)
    await gateway.start()
    sent = [await gateway.publish(MINILM, item=Item(text=f"item {i}")) for i in range(ITEMS)]
    worker = queue_worker(settings, engine, worker_identity(settings), Lifecycle(), Metrics(), None)
    await worker.start()
    try:
        results = await gateway.wait_for(ITEMS, 60)
        await asyncio.sleep(0.1)
    finally:
        await worker.stop()
        await client.close()
    assert sorted(r.work_item_id for r in results) == sorted(sent) and all(r.success for r in results)
    assert asked and max(asked) == largest  # the first pull, with twelve waiting, asks for the budget
    if budget is not None:
        assert len(asked) >= ITEMS // int(budget)  # so twelve items took six pulls or more
