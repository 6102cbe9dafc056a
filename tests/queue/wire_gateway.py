"""A raw wire client for the worker tests: it publishes hand-made work items (expired ones, bad ones,
which ``sie-gateway`` never sends) to a lane's subject and collects the results from one inbox."""

from __future__ import annotations

import asyncio
import time

import nats

from sie.queue.contract import (
    Lane,
    WorkItem,
    WorkResult,
    decode_work_result,
    encode_message,
    work_subject,
)
from sie.queue.streams import ensure_work_stream


class Gateway:
    """What a gateway does on the wire: publish work items, collect results from one inbox."""

    def __init__(self, client: nats.NATS, lane: Lane) -> None:
        self.client = client
        self.lane = lane
        self.jetstream = client.jetstream()
        self.inbox = client.new_inbox()
        self.results: list[WorkResult] = []
        self.counter = 0

    async def start(self) -> None:
        await ensure_work_stream(self.jetstream, self.lane.pool)

        async def collect(message: nats.aio.msg.Msg) -> None:
            self.results.append(decode_work_result(message.data))

        await self.client.subscribe(self.inbox, cb=collect)

    async def publish(self, model: str, operation: str = "encode", **fields: object) -> str:
        self.counter += 1
        work = WorkItem(
            f"gw-{self.counter}.0",
            f"gw-{self.counter}",
            0,
            1,
            operation,
            model,
            "default",
            self.lane.pool,
            self.lane.machine_profile,
            "gw",
            self.inbox,
            time.time(),
        )
        for key, value in fields.items():
            setattr(work, key, value)
        await self.jetstream.publish(
            work_subject(self.lane.pool, self.lane.machine_profile, self.lane.bundle, model),
            encode_message(work),
        )
        return work.work_item_id

    async def wait_for(self, count: int, timeout_s: float) -> list[WorkResult]:
        deadline = time.monotonic() + timeout_s
        while len(self.results) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.results
