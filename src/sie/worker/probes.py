"""The queue worker's probe port (``SIE_WORKER_METRICS_PORT``): ``/healthz``, ``/readyz``, ``/metrics``.

Kubernetes probes a queue worker here rather than on the HTTP API. Ready means: connected to NATS
(the last ping, every ``SIE_WORKER_PING_INTERVAL_MS``, answered within
``SIE_WORKER_READYZ_STALE_MULT`` intervals) and not draining; a worker cut off from NATS is taken out
of service although its process lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Generator

import uvicorn
from nats.aio.client import Client
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sie.queue.connection import ping

log = logging.getLogger(__name__)


class Readiness:
    def __init__(self, ping_interval_s: float, stale_mult: float, draining: Callable[[], bool]) -> None:
        self._interval_s = ping_interval_s
        self._stale_s = ping_interval_s * stale_mult
        self._draining = draining
        self._last_ok = float("-inf")
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def start(self, client: Client) -> None:
        self._task = asyncio.create_task(self._ping(client), name="sie-worker-ping")

    async def _ping(self, client: Client) -> None:
        # A flag as well as the cancel: Python 3.11's wait_for (inside nats-py's flush) can swallow a
        # cancellation that lands as its future completes, and the loop would then run on.
        while not self._stopped:
            try:
                await ping(client, self._interval_s)
                if client.is_connected:  # nats-py answers a flush from its buffer while reconnecting
                    self._last_ok = time.monotonic()
            except Exception:
                log.debug("NATS ping failed", exc_info=True)
            await asyncio.sleep(self._interval_s)

    def problems(self) -> list[str]:
        found = []
        if self._draining():
            found.append("draining")
        if time.monotonic() - self._last_ok > self._stale_s:
            found.append("NATS unreachable")
        return found

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def probe_app(readiness: Readiness, render_metrics: Callable[[], bytes]) -> Starlette:
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        problems = readiness.problems()
        if problems:
            return JSONResponse({"status": "not_ready", "reasons": problems}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def metrics(_: Request) -> Response:
        return Response(render_metrics(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
    )


class _Listener(uvicorn.Server):
    """Leaves the signals to the main server: its SIGTERM starts the drain."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class ProbeServer:
    """A second small listener in the worker's event loop."""

    def __init__(self, app: Starlette, host: str, port: int) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self._server = _Listener(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(), name="sie-worker-probes")
        while not self._server.started:
            if self._task.done():  # the port is taken: say so at startup
                self._task.result()
                raise RuntimeError("the worker probe server stopped at startup")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
