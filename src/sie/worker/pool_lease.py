"""Pool admission: a worker of a named pool pulls only while the gateway holds a lease on that pool.

With ``SIE_GATEWAY_URL`` set and ``SIE_POOL_ADMISSION_ENABLED`` (the default), a worker whose
``SIE_POOL`` is not ``default`` asks the gateway for its pools every ``POLL_S``; while no unexpired
pool is named so or backed by that queue (``queue_pool``), its pull loop is paused, so capacity reserved for a pool is not spent before anyone
leased it, and stops being spent once the lease lapses. The default pool is always admitted, and a
gateway that cannot be reached changes nothing (a worker keeps its last answer).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final, Protocol

import httpx

from sie.queue.contract import DEFAULT_LANE_TOKEN

log = logging.getLogger(__name__)

POLL_S: Final = 2.0


class Pausable(Protocol):
    paused: bool


class PoolAdmission:
    def __init__(
        self, gateway_url: str | None, pool: str, target: Pausable, token: str | None = None
    ) -> None:
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._url = f"{gateway_url.rstrip('/')}/v1/pools" if gateway_url else None
        self._pool = pool
        self._target = target
        self._task: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None

    @property
    def applies(self) -> bool:
        return self._url is not None and self._pool != DEFAULT_LANE_TOKEN

    async def start(self) -> None:
        if not self.applies:
            return
        self._http = httpx.AsyncClient(timeout=POLL_S)
        self._target.paused = True
        await self.check()  # the first answer decides before anything is pulled
        self._task = asyncio.create_task(self._run(), name="sie-pool-admission")

    async def check(self) -> None:
        assert self._http is not None and self._url is not None
        try:
            response = await self._http.get(self._url, headers=self._headers)
        except httpx.HTTPError as exc:
            log.warning(
                "pool admission: gateway unreachable (%s); keeping paused=%s", exc, self._target.paused
            )
            return
        if response.is_success:
            admitted = any(self._backs(view) for view in response.json().get("pools", []))
        else:
            log.warning(
                "pool admission: gateway answered %d; keeping paused=%s",
                response.status_code,
                self._target.paused,
            )
            return
        if admitted == self._target.paused:
            log.info(
                "pool '%s' %s: %s pulling",
                self._pool,
                "leased" if admitted else "not leased",
                "resuming" if admitted else "pausing",
            )
        self._target.paused = not admitted

    def _backs(self, view: dict[str, Any]) -> bool:
        spec = view.get("spec", {})
        named = self._pool in (spec.get("name"), spec.get("queue_pool"))
        return named and view.get("status", {}).get("state") != "expired"

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            await self.check()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
