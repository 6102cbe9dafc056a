"""Config deltas on NATS: one JSON message per bundle a write touched, on the bundle's subject (its
workers listen there) and on ``sie.config.models._all`` (gateways listen there).

The messages are NATS core, not JetStream: a follower that misses one (disconnected, restarting)
learns of the write from the epoch it polls, so the delta only makes convergence fast, never correct.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from nats.aio.client import Client

from sie.queue.access import NatsAccess
from sie.queue.connection import connect, ping
from sie.queue.contract import CONFIG_ALL_SUBJECT, config_subject

log = logging.getLogger(__name__)


class DeltaPublisher:
    def __init__(self, access: NatsAccess, router_id: str) -> None:
        self._access = access
        self.router_id = router_id
        self._client: Client | None = None
        self._joining: asyncio.Task[Client] | None = None

    def start(self) -> None:
        """Join NATS in the background: the service answers reads (and probes) before NATS does."""
        self._joining = asyncio.create_task(connect(self._access, "sie-config"), name="sie-config-nats")
        self._joining.add_done_callback(self._joined)

    def _joined(self, task: asyncio.Task[Client]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._client = task.result()
            log.info("joined NATS at %s as producer %s", self._access.described(), self.router_id)

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.is_connected

    async def publish(self, deltas: list[dict[str, Any]]) -> list[str]:
        """Publish each bundle's delta; returns the bundles whose publish failed."""
        failed = []
        for delta in deltas:
            data = msgspec.json.encode({"router_id": self.router_id, **delta})
            try:
                if self._client is None:
                    raise ConnectionError("not connected to NATS")
                await self._client.publish(config_subject(delta["bundle_id"]), data)
                await self._client.publish(CONFIG_ALL_SUBJECT, data)
            except Exception as exc:
                log.warning("config delta for bundle %s not published: %s", delta["bundle_id"], exc)
                failed.append(delta["bundle_id"])
        if self._client is not None and not failed:
            try:
                await ping(self._client, 5)
            except Exception as exc:
                log.warning("config deltas not flushed: %s", exc)
                failed = [delta["bundle_id"] for delta in deltas]
        return failed

    async def stop(self) -> None:
        if self._joining is not None and not self._joining.done():
            self._joining.cancel()
            await asyncio.gather(self._joining, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
