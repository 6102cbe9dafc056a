"""One way to reach NATS for every process of the cluster: keep trying until the first connect
succeeds (a worker or gateway may start before ``nats-server``), then reconnect for ever (a restarted
``nats-server`` is rejoined without restarting us).

Credentials come from settings (``sie.queue.access.NatsAccess``), never only inside the URL, and no
log line carries them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import nats
from nats.aio.client import Client
from nats.js.errors import ServiceUnavailableError

from sie.queue.access import NatsAccess

log = logging.getLogger(__name__)

FIRST_RETRY_S: Final = 0.25
MAX_RETRY_S: Final = 5.0


async def connect(
    access: NatsAccess, name: str, on_reconnect: Callable[[], Awaitable[None]] | None = None
) -> Client:
    wait = FIRST_RETRY_S
    options = access.options()
    while True:
        try:
            return await nats.connect(
                servers=access.servers,
                name=name,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.5,
                connect_timeout=5,
                reconnected_cb=on_reconnect,
                disconnected_cb=_disconnected,
                error_cb=_error,
                **options,
            )
        except (OSError, nats.errors.Error, TimeoutError) as exc:
            log.warning("NATS at %s not reachable (%s); retrying in %.1fs", access.described(), exc, wait)
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_RETRY_S)


T = TypeVar("T")

# What a JetStream API request meets while the cluster cannot answer it yet: a 3-node cluster that is
# electing its meta or stream leaders (at start, after a node died) lets requests time out, finds no
# responders, or answers 503.
_NOT_YET: Final = (nats.errors.TimeoutError, nats.errors.NoRespondersError, ServiceUnavailableError)


async def until_answered(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """``call`` (idempotent JetStream API requests) until the cluster answers it, with ``connect``'s
    backoff: a worker that gave up on its stream or consumer at start would stand with its HTTP side
    up and never pull. Other errors (a request JetStream refuses) are the caller's."""
    wait = FIRST_RETRY_S
    while True:
        try:
            return await call()
        except _NOT_YET as exc:
            log.warning(
                "%s: JetStream did not answer (%s); retrying in %.1fs", what, type(exc).__name__, wait
            )
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_RETRY_S)


async def _disconnected() -> None:
    log.warning("disconnected from NATS; reconnecting")


async def _error(error: Exception) -> None:
    """nats-py's default prints a traceback for every failed reconnect attempt; one line will do."""
    log.info("NATS: %s: %s", type(error).__name__, error)


async def ping(client: Client, timeout_s: float) -> None:
    """``client.flush(timeout)`` (a PING answered by a PONG) without nats-py 2.16's trap: a flush that
    times out cancels its future but leaves it queued for the next PONG, and when that PONG comes late
    (a partition heals, a stalled server resumes) setting the cancelled future's result raises inside
    the read loop, which ends: the connection still writes (heartbeats go out, the worker looks
    healthy) but reads nothing again, neither work nor config. The timed-out future is swapped for a
    fresh one in place, so the late PONG lands on it and the PONGs stay in step with the PINGs."""
    waiting: list[asyncio.Future[bool]] = getattr(client, "_pongs", [])
    before = set(map(id, waiting))
    try:
        await client.flush(timeout=max(1, round(timeout_s)))
    except nats.errors.FlushTimeoutError:
        for i, future in enumerate(waiting):
            if future.cancelled() and id(future) not in before:
                waiting[i] = asyncio.get_running_loop().create_future()
        raise
