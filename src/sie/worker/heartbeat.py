"""The worker's heartbeat on ``sie.health.{worker_id}``: how gateways learn that it exists, which lane
it serves and which models it holds. Published every ``SIE_HEALTH_PUBLISH_INTERVAL_MS`` and at once
when its models change (a gateway lists a model as soon as it is loaded), and a last time with
``terminated`` on shutdown so gateways forget it without waiting for it to go stale."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Final

import msgspec
from nats.aio.client import Client

from sie.catalog.bundles import CatalogHash
from sie.engine.engine import Engine
from sie.engine.loader import ModelState
from sie.observability.gpus import gpu_metrics
from sie.queue.connection import ping
from sie.queue.contract import Heartbeat, Lane, encode_heartbeat

log = logging.getLogger(__name__)

CHANGE_POLL_S: Final = 0.25


class HeartbeatPublisher:
    def __init__(
        self, client: Client, subject: str, snapshot: Callable[[], Heartbeat], interval_s: float
    ) -> None:
        self._client = client
        self._subject = subject
        self._snapshot = snapshot
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sie-heartbeat")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        last_sent, last_models = float("-inf"), None
        while True:
            try:
                heartbeat = self._snapshot()
            except Exception:  # a beat skipped is a worker briefly unseen; a dead loop is one gone
                log.exception("heartbeat snapshot failed")
                await asyncio.sleep(self._interval_s)
                continue
            models = (heartbeat.ready, heartbeat.loaded_models, heartbeat.loading_models)
            now = loop.time()
            if models != last_models or now - last_sent >= self._interval_s:
                await self._publish(heartbeat)
                last_sent, last_models = now, models
            await asyncio.sleep(min(CHANGE_POLL_S, self._interval_s))

    async def _publish(self, heartbeat: Heartbeat) -> None:
        try:
            await self._client.publish(self._subject, encode_heartbeat(heartbeat))
        except Exception:  # disconnected: the next beat goes out after the reconnect
            log.debug("heartbeat not published", exc_info=True)

    async def stop(self) -> None:
        """The last beat says ``terminated``: gateways stop routing here at once."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        last = msgspec.structs.replace(self._snapshot(), ready=False, terminated=True)
        await self._publish(last)
        try:
            await ping(self._client, 2)
        except Exception:
            log.debug("last heartbeat not flushed", exc_info=True)


def heartbeat(
    engine: Engine,
    config_hash: CatalogHash,
    draining: bool,
    lane: Lane,
    worker_id: str,
    gpu_count: int | None,
) -> Heartbeat:
    """A queue worker's ``sie.health`` beat: cheap enough to build four times a second (no device
    query; the GPU count is the configured one, else the first call's)."""
    loaded, loading, depth = [], [], 0
    for slot in engine.slots():
        name = slot.entry.name
        if slot.state is ModelState.LOADED:
            loaded.append(name)
            depth += engine.queue_depth(name)
        elif slot.state is ModelState.LOADING:
            loading.append(name)
    gpus = gpu_count if gpu_count is not None else _detected_gpus()
    ready = not draining
    return Heartbeat(
        name=worker_id,
        ready=ready,
        machine_profile=lane.machine_profile,
        pool_name=lane.pool,
        bundle=lane.bundle,
        timestamp=time.time(),
        gpu_count=max(gpus, 1),
        total_gpu_slots=max(gpus, 1),
        ready_gpu_slots=max(gpus, 1) if ready else 0,
        bundle_config_hash=config_hash(engine.catalog),
        loaded_models=loaded,
        loading_models=loading,
        queue_depth=depth,
    )


@functools.cache
def _detected_gpus() -> int:
    return len(gpu_metrics(100.0))
