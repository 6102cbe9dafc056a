"""Readiness and the drain after SIGTERM: one object the probes, the middleware and the server share.

A load balancer only stops sending traffic once it has seen ``/readyz`` fail, so the drain runs while
the listener is still open: ``/readyz`` answers 503 from the moment the signal lands, new requests are
refused with 503 and ``Retry-After`` (another replica will take them), and the requests already inside
finish. Only then does uvicorn close the listener and the lifespan unload the models.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from sie.engine.errors import EngineClosed
from sie.http.errors import error_response, openai_error_response

log = logging.getLogger(__name__)

# Answered while draining and never counted as work: a prober or a scraper polling them must neither
# be refused nor keep the drain from ending.
PROBE_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
DRAIN_POLL_S: Final = 0.05
# After the drain limit, how long the requests refused by ``on_overdue`` get to write their 503s.
OVERDUE_GRACE_S: Final = 2.0
SHUTTING_DOWN: Final = "The server is shutting down; retry on another replica"


class Lifecycle:
    def __init__(
        self,
        drain_timeout_s: float = 25.0,
        drain_min_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep  # a test's own time, to drive the drain
        self.drain_timeout_s = drain_timeout_s
        self.drain_min_s = drain_min_s
        self.draining = False
        self.in_flight = 0
        self.started_at = time.time()
        # Called when the drain limit passes with requests still in flight: the engine's close, which
        # fails their queued items with ``EngineClosed`` so each gets a 503 + Retry-After instead of a
        # cut connection.
        self.on_overdue: Callable[[], Awaitable[None]] | None = None

    def begin_drain(self) -> None:
        """Safe from a signal handler: it only flips a flag the request path reads."""
        self.draining = True

    async def drain(self) -> bool:
        """Wait until no request is in flight (and at least ``drain_min_s``), at most
        ``drain_timeout_s``; True when everything was answered in time."""
        self.begin_drain()
        started = self._clock()
        log.warning(
            "draining %d request(s) in flight before shutdown (at most %.0f s)",
            self.in_flight,
            self.drain_timeout_s,
        )
        deadline = started + self.drain_timeout_s
        earliest = started + min(self.drain_min_s, self.drain_timeout_s)
        while self._clock() < deadline and (self.in_flight > 0 or self._clock() < earliest):
            await self._sleep(DRAIN_POLL_S)
        drained = self.in_flight == 0
        if drained:
            log.info("drained in %.2f s", self._clock() - started)
            return True
        log.warning("drain timed out with %d request(s) still in flight; refusing them", self.in_flight)
        if self.on_overdue is not None:
            await self.on_overdue()
            grace = self._clock() + OVERDUE_GRACE_S
            while self.in_flight > 0 and self._clock() < grace:
                await self._sleep(DRAIN_POLL_S)
        return False


class Draining:
    """Counts the requests in flight and, once draining, refuses new ones with the engine's
    ``EngineClosed`` rule (503 ``MODEL_NOT_LOADED``, ``Retry-After``) in the envelope of the route
    asked (OpenAI's on the OpenAI routes). Probes and ``/metrics`` pass through uncounted."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle, openai_routes: tuple[BaseRoute, ...] = ()) -> None:
        self.app = app
        self.lifecycle = lifecycle
        self.openai_routes = openai_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PROBE_PATHS:
            await self.app(scope, receive, send)
            return
        lifecycle = self.lifecycle
        if lifecycle.draining:
            exc = EngineClosed(SHUTTING_DOWN)
            openai = any(route.matches(scope)[0] is Match.FULL for route in self.openai_routes)
            response = openai_error_response(exc) if openai else error_response(exc)
            await response(scope, receive, send)
            return
        lifecycle.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            lifecycle.in_flight -= 1
