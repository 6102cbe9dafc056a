"""A queue-mode worker: one NATS connection carrying the pull loop, the heartbeat, the readiness ping
and (with a gateway to ask) pool admission, beside the engine in the server's process.

The composition root (``server.app``) builds it when ``SIE_NATS_URL`` is set; see docs/cluster.md
for why it runs in the server's process rather than as a sidecar.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from msgspec.structs import replace
from nats.aio.client import Client
from nats.aio.msg import Msg

from sie.catalog.follower import ConfigFollower
from sie.engine.engine import Engine
from sie.observability.metrics import Metrics
from sie.queue.access import NatsAccess
from sie.queue.connection import connect
from sie.queue.contract import Heartbeat, Lane, config_subject, health_subject
from sie.queue.payloads import PayloadStore
from sie.worker.adaptive import AdaptiveWait
from sie.worker.heartbeat import HeartbeatPublisher
from sie.worker.pace import HOLD_S, Pace
from sie.worker.pool_lease import PoolAdmission
from sie.worker.probes import ProbeServer, Readiness, probe_app
from sie.worker.pull import PullLoop, Redelivery

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    nats: NatsAccess
    lane: Lane
    worker_id: str
    wait: AdaptiveWait
    max_in_flight: int
    heartbeat_interval_s: float
    ping_interval_s: float
    readyz_stale_mult: float
    probe_host: str
    probe_port: int  # 0: no probe listener
    gateway_url: str | None  # pool admission asks this gateway; None: always admitted
    gateway_token: str | None
    admission_enabled: bool
    payload_store_url: str | None
    redelivery: Redelivery = field(default_factory=Redelivery)
    fetch_budget: int = 64  # most items one pull asks for (SIE_NATS_FETCH_BUDGET)
    hold_s: float = HOLD_S  # the work held, in seconds of the worker's pace (SIE_NATS_HOLD_S; 0: off)


class QueueWorker:
    def __init__(
        self,
        engine: Engine,
        config: WorkerConfig,
        snapshot: Callable[[], Heartbeat],
        metrics: Metrics,  # the process's own: /metrics on the probe port, and the pull loop's counts
        draining: Callable[[], bool],
        follower: ConfigFollower | None = None,
    ) -> None:
        self._engine = engine
        self._follower = follower
        self._config = config
        self._snapshot = snapshot
        self._metrics = metrics
        self._draining = draining
        self._client: Client | None = None
        self._starting: asyncio.Task[None] | None = None
        self.pull: PullLoop | None = None
        self._admission: PoolAdmission | None = None
        self._heartbeat: HeartbeatPublisher | None = None
        self._readiness: Readiness | None = None
        self._probes: ProbeServer | None = None

    async def start(self) -> None:
        """Returns at once; the worker joins the cluster as soon as NATS answers (the HTTP API and
        the probes do not wait for it)."""
        config = self._config
        self._readiness = Readiness(config.ping_interval_s, config.readyz_stale_mult, self._draining)
        if config.probe_port:  # first: probes answer (not ready) while NATS is still out of reach
            app = probe_app(self._readiness, self._metrics.render)
            self._probes = ProbeServer(app, config.probe_host, config.probe_port)
            await self._probes.start()
        self._starting = asyncio.create_task(self._start(), name="sie-queue-worker-start")
        self._starting.add_done_callback(_report_failure)

    async def _start(self) -> None:
        config = self._config
        client = self._client = await connect(
            config.nats, f"sie-worker {config.worker_id}", self._reconnected
        )
        pull = self.pull = PullLoop(
            self._engine,
            client,
            config.lane,
            config.worker_id,
            fetch_budget=config.fetch_budget,
            max_in_flight=config.max_in_flight,
            wait=config.wait,
            payloads=PayloadStore(config.payload_store_url) if config.payload_store_url else None,
            config_pending=self._config_pending if self._follower is not None else None,
            metrics=self._metrics,
            redelivery=config.redelivery,
            pace=Pace(config.hold_s),
        )
        if self._follower is not None:
            follower = self._follower

            async def on_delta(message: Msg) -> None:
                await follower.on_delta(message.data)

            await client.subscribe(config_subject(config.lane.bundle), cb=on_delta)
        self._admission = PoolAdmission(config.gateway_url, config.lane.pool, pull, config.gateway_token)
        if config.admission_enabled:
            await self._admission.start()
        await pull.start()
        self._heartbeat = HeartbeatPublisher(
            client, health_subject(config.worker_id), self._beat, config.heartbeat_interval_s
        )
        self._heartbeat.start()
        assert self._readiness is not None
        self._readiness.start(client)
        log.info("queue worker %s joined lane %s", config.worker_id, config.lane)

    def _config_pending(self, model: str) -> bool:
        """An unknown model may be a config on its way: poll sie-config now, and let the item wait."""
        assert self._follower is not None
        self._follower.nudge()
        return True

    async def _reconnected(self) -> None:
        if self.pull is not None:
            self.pull.pull_again()

    def _beat(self) -> Heartbeat:
        """Paused by pool admission, a worker is not ready: gateways answer 202 rather than queue
        items it will not pull."""
        beat = self._snapshot()
        if self.pull is not None and self.pull.paused:
            return replace(beat, ready=False, ready_gpu_slots=0)
        return beat

    async def stop(self) -> None:
        """Gateways hear ``terminated`` first, then the items in flight finish and are acked; what is
        left unacked goes to another worker."""
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self._heartbeat is not None:
            await self._heartbeat.stop()
        if self._admission is not None:
            await self._admission.stop()
        if self.pull is not None:
            await self.pull.stop()
        if self._readiness is not None:
            await self._readiness.stop()
        if self._probes is not None:
            await self._probes.stop()
        if self._client is not None:
            # Not drain(): it would wait out the lingering pull request; everything handled is acked.
            await self._client.close()


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the queue worker failed to start", exc_info=task.exception())
